"""An environment per repository and version: a virtual environment with the project's dependencies,
built once, keyed by what it holds, and reused by every instance of that repository.

Why keyed by content: two instances of one repository at one version need the same packages, and
building them per instance is most of an SWE run's cost. The key is a hash of the repository, the
version, the requirements and the interpreter (as the sandbox's base image is keyed by its inputs),
so a changed requirement is a new environment and never a stale one. The environment layers over the
interpreter the sandbox runs (a .pth file names its site-packages: pytest and the runner's needs come
from there) and adds only the project's requirements. The build writes `build.log` beside it; a
requirement that cannot be had is an EnvError naming it and the log, and leaves no half-built
environment behind. Builds of one key are serialised by a lock, so parallel factories share one.
The sandbox finds a built environment by its key (`EnvCache.find`) and mounts it read-only where the
instance's tests run, with the host paths its interpreter needs (`Env.host_paths`).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

READY = "environment.json"
BASE_PTH = "m1flow_base.pth"  # names the sandbox interpreter's site-packages (pytest and the runner's needs)
KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")  # what EnvSpec.key makes: one plain folder name


class EnvError(RuntimeError):
    """An environment that cannot be built (the message names the requirement and the build log)."""


class EnvSpec(BaseModel):
    repo: str = Field(min_length=1)
    version: str = Field(min_length=1)
    requirements: list[str] = Field(default_factory=list, description="pip requirement specifiers")
    python: str = Field(sys.executable, description="the interpreter the environment layers over")

    @property
    def key(self) -> str:
        """The content key: the same inputs, the same environment."""
        text = json.dumps({"repo": self.repo, "version": self.version, "requirements": sorted(self.requirements),
                           "python": str(Path(self.python).resolve()), "abi": sys.version}, sort_keys=True)
        return f"{self.repo.replace('/', '__')}-{self.version}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class Env:
    path: Path
    key: str
    built: bool  # False: reused from the cache

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def log(self) -> Path:
        return self.path / "build.log"

    def host_paths(self) -> list[Path]:
        """What a jail must mount for this environment's interpreter to run: the environment, the base
        installation its pyvenv.cfg names (stdlib), and the site-packages our own .pth layers in (only
        ours: a .pth an installed package wrote could name any host folder)."""
        paths = [self.path]
        cfg = self.path / "pyvenv.cfg"
        for line in cfg.read_text().splitlines() if cfg.exists() else []:
            name, _, value = line.partition("=")
            if name.strip() == "home" and value.strip():
                paths.append(Path(value.strip()).resolve().parent)  # home is the base's bin/
        for pth in self.path.glob(f"lib/python*/site-packages/{BASE_PTH}"):
            paths += [Path(line.strip()) for line in pth.read_text().splitlines()
                      if line.strip().startswith("/") and Path(line.strip()).is_dir()]
        return list(dict.fromkeys(p.resolve() for p in paths))


class EnvCache:
    """Environments under `root`, one folder per key. pip_args: how pip reaches packages (default the
    configured index; `--no-index --find-links DIR` for a local wheelhouse)."""

    def __init__(self, root: str | Path, pip_args: tuple[str, ...] = ()) -> None:
        self.root = Path(root)
        self.pip_args = pip_args

    def ensure(self, spec: EnvSpec) -> Env:
        """The environment of `spec`: the cached one, else built now (EnvError when it cannot be)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / spec.key
        with open(self.root / f".{spec.key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (path / READY).exists():
                return Env(path, spec.key, built=False)
            self._build(spec, path)
        return Env(path, spec.key, built=True)

    def find(self, key: str) -> Env | None:
        """The built environment of `key`, or None: a name that is not a key, a folder that is a link,
        half built or absent. Never builds: the sandbox only runs what a factory made."""
        if not KEY.match(key):
            return None
        path = self.root / key
        if path.is_symlink() or not path.is_dir() or not (path / READY).is_file() or not (path / "bin").is_dir():
            return None
        return Env(path, key, built=False)

    def _build(self, spec: EnvSpec, path: Path) -> None:
        partial = path.with_name(path.name + ".building")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            self._build_into(spec, partial)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)  # never a half-built environment
            raise
        shutil.move(str(self.root / f"{spec.key}.build.log"), partial / "build.log")
        partial.rename(path)

    def _build_into(self, spec: EnvSpec, partial: Path) -> None:
        log = self.root / f"{spec.key}.build.log"
        with open(log, "w") as out:
            self._step(spec, [spec.python, "-m", "venv", "--without-pip", str(partial)], out, log, "create the venv")
            base = subprocess.run([spec.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            own = sysconfig.get_paths(vars={"base": str(partial), "platbase": str(partial)})["purelib"]
            Path(own).mkdir(parents=True, exist_ok=True)
            (Path(own) / BASE_PTH).write_text(base + "\n")  # the sandbox interpreter's packages
            for requirement in spec.requirements:
                self._step(spec, [str(partial / "bin" / "python"), "-m", "pip", "install", "--no-input",
                                  "--disable-pip-version-check", *self.pip_args, requirement], out, log,
                           f"install {requirement!r}")
            (partial / READY).write_text(spec.model_dump_json(indent=1))

    @staticmethod
    def _step(spec: EnvSpec, argv: list[str], out, log: Path, what: str) -> None:  # noqa: ANN001
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT)
        if done.returncode:
            out.flush()
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise EnvError(f"environment of {spec.repo} {spec.version}: cannot {what} (exit {done.returncode}): "
                           f"{' | '.join(tail)}; the build log: {log}")
