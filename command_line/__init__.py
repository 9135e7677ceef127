"""The command line's click wiring, one module a command group (``cli.py`` holds the ``ctk``
group and adds them): ``running`` (run, show, export), ``studies`` (sweep, study, tune,
reproduce), ``reading`` (list, runs, compare), ``servers`` (ui, server), ``data`` (the offline
datasets), ``options`` (what they share). A command parses its options here and calls
``commands.py`` (which meets the domains) or a toolkit room; nothing here imports a domain, and
nothing imports torch before a command needs it."""
