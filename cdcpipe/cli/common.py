"""What every command group of the CLI shares."""

from __future__ import annotations

from ground.settings import StageSettings


def settings_help(model: type[StageSettings]) -> str:
    """The settings a command reads, each with its environment variable: shown under --help."""
    # "\\[" keeps rich from reading the section name as markup.
    lines = [f"Settings (\\[{model.toml_section}] in $CDCPIPE_CONFIG or ./cdcpipe.toml, or environment):\n\n"]
    lines += [f"{var} (default {default or 'none'}): {text}\n\n" for var, default, text in model.describe()]
    return "".join(lines)
