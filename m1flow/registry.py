"""Named implementations chosen by config, in the spirit of verl's core_algos registries."""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> implementation; a typo in a config names what is known instead of failing later.

    An implementation registers itself where it is written (`@REGISTRY.register("name")`). One
    whose module is costly to import (SymPy, a model) can be declared with `lazy(name, module)`:
    the module is imported, and its decorator runs, only when the name is first looked up.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, T] = {}
        self._modules: dict[str, str] = {}

    def add(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: `@REGISTRY.register("name")`."""
        return lambda item: self.add(name, item)

    def lazy(self, name: str, module: str) -> None:
        """`name` is registered by importing `module` (its decorator), on the first `get(name)`."""
        if name in self._modules and self._modules[name] != module:
            raise ValueError(f"{self.what} {name!r} is declared in {self._modules[name]} and {module}")
        self._modules[name] = module

    def get(self, name: str) -> T:
        if name not in self._items and name in self._modules:
            importlib.import_module(self._modules[name])
            if name not in self._items:
                raise ValueError(f"{self.what} {name!r}: importing {self._modules[name]} did not register it")
        try:
            return self._items[name]
        except KeyError:
            raise ValueError(f"unknown {self.what} {name!r}; known: {', '.join(self.names())}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(sorted({*self._items, *self._modules}))

    def __contains__(self, name: object) -> bool:
        return name in self._items or name in self._modules
