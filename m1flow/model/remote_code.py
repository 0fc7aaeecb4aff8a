"""The hybrid model's self-contained modeling files and the `auto_map` that points at them: what
makes a policy directory open in plain transformers (`trust_remote_code=True`) in a process that
never imported m1flow, as the released MiniMax-M1 checkpoint does."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

SOURCES = Path(__file__).resolve().parent / "remote"
FILES = ("configuration_minimax_m1.py", "modeling_minimax_m1.py")
AUTO_MAP = {"AutoConfig": "configuration_minimax_m1.MiniMaxM1Config",
            "AutoModelForCausalLM": "modeling_minimax_m1.MiniMaxM1ForCausalLM"}


def install(directory: str | Path, config_file: str = "config.json") -> None:
    """Copy the modeling files into a saved hybrid model directory and add `auto_map` to its config."""
    directory = Path(directory)
    for name in FILES:
        shutil.copyfile(SOURCES / name, directory / name)
    path = directory / config_file
    config = json.loads(path.read_text())
    config["auto_map"] = dict(AUTO_MAP)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
