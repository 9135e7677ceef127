"""``python -m toolkit.data ARGS`` is ``ctk data ARGS``: list | fetch NAME... | fetch default |
path NAME | verify [NAME...] (``--help`` says more).

The dataset catalogues belong to the domains (``domains/vision/packaged.py``,
``domains/text/packaged.py``), which the toolkit never imports; the command line that loads them
is ``cli.py`` (the ``ctk`` command). So this runs that command, in a process of its own, with the
same arguments, output and exit status: ``$(python -m toolkit.data path austen)`` works as
``$(ctk data path austen)`` does.
"""

import importlib.util
import subprocess
import sys


def main(argv: list[str]) -> int:
    spec = importlib.util.find_spec("cli")  # the module the `ctk` command runs (pyproject: ctk = "cli:main")
    if spec is None or not spec.origin:
        print(
            "error: `python -m toolkit.data` runs `ctk data`, and cli.py is not importable here: "
            "run it from the repository root, or install ctk (pip install -e .) and run `ctk data ...`",
            file=sys.stderr,
        )
        return 2
    return subprocess.call([sys.executable, spec.origin, "data", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
