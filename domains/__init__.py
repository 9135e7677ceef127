"""Domain adapters: vision, text, rl, toy (built in) and third-party domains found through the
``ctk.domains`` entry-point group. A domain imports ``toolkit`` and ``domains.base`` /
``domains.installed``, never another domain."""
