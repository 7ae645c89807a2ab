"""The YAML loader of every user file the package reads (configs, manifests, ``--set`` values):
PyYAML's safe loader that also refuses, while composing, a key given twice in one mapping (a
merge key that an explicit key overrides is not a repetition), aliases that repeat more than
:data:`MAX_ALIASED_NODES` nodes in all, and an alias inside the node it names. Each refusal is
a :class:`YAMLRefused` (a ``yaml.MarkedYAMLError``: the readers name the file and line)."""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent

#: nodes that aliases may repeat in one document (each alias counts the nodes of what it names,
#: aliases within included): far above a hand-written config's few hundred, far below a bomb's
MAX_ALIASED_NODES = 100_000

_MERGE_TAG = "tag:yaml.org,2002:merge"


class YAMLRefused(yaml.MarkedYAMLError):
    """A document the loader refuses: a repeated key, aliases beyond the bound, a recursive alias."""

    def __init__(self, problem: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class StrictLoader(yaml.SafeLoader):
    """:class:`yaml.SafeLoader` that refuses repeated keys and alias bombs (module docstring)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._aliased = 0  # nodes repeated by the aliases so far
        self._sizes: dict[int, int] = {}  # id(node) -> its nodes, aliases expanded
        self._complete: set[int] = set()  # ids of the nodes fully composed

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:
                if id(node) not in self._complete:
                    raise YAMLRefused(
                        f"alias *{event.anchor} is inside the node it names (a recursive "
                        "document); write the values out",
                        event.start_mark,
                    )
                self._aliased += self._size(node)
                if self._aliased > MAX_ALIASED_NODES:
                    raise YAMLRefused(
                        f"the aliases repeat more than {MAX_ALIASED_NODES:,} nodes (alias "
                        f"*{event.anchor} here brings the total to {self._aliased:,}); write the "
                        "values out, or use fewer nested aliases",
                        event.start_mark,
                    )
            return super().compose_node(parent, index)
        node = super().compose_node(parent, index)
        if node is not None:
            self._complete.add(id(node))
        return node

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        node = super().compose_mapping_node(anchor)
        first: dict[tuple[str, str], yaml.Node] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                continue
            seen = first.setdefault((key.tag, key.value), key)
            if seen is not key:
                raise YAMLRefused(
                    f"key {key.value!r} given twice (first on line {seen.start_mark.line + 1}); "
                    "keep one",
                    key.start_mark,
                )
        return node

    def _size(self, node: yaml.Node) -> int:
        """Nodes of ``node`` with every alias in it expanded (memoised: linear in the document)."""
        size = self._sizes.get(id(node))
        if size is None:
            if isinstance(node, yaml.ScalarNode):
                size = 1
            elif isinstance(node, yaml.SequenceNode):
                size = 1 + sum(self._size(n) for n in node.value)
            else:
                size = 1 + sum(self._size(k) + self._size(v) for k, v in node.value)
            self._sizes[id(node)] = size
        return size


def load_yaml(text: str) -> Any:
    """``text`` parsed as YAML by :class:`StrictLoader` (safe tags only); a ``yaml.YAMLError``
    (or :class:`YAMLRefused`) gives the line in its ``problem_mark``."""
    return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass: safe tags only


def compose_yaml(text: str) -> yaml.Node | None:
    """The node tree of ``text`` (for the lines of its keys), with :class:`StrictLoader`'s checks."""
    return yaml.compose(text, Loader=StrictLoader)
