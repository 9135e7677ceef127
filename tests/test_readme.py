"""The README holds exactly two set-up commands, and CI runs the test one."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands():
    text = (ROOT / "README.md").read_text()
    head = text.split("## A two-minute tour")[0]
    blocks = head.split("```bash\n")[1:]
    return [b.split("```")[0].strip() for b in blocks]


def test_readme_has_exactly_two_commands():
    commands = _commands()
    assert len(commands) == 2
    assert all(c.startswith("scripts/setup.sh && ") for c in commands)
    assert "ctk run recipes/" in commands[0]
    assert "pytest" in commands[1]
    recipe = commands[0].split("ctk run ")[1].split()[0]
    assert (ROOT / recipe).is_file(), recipe


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _commands()[1] in ci
