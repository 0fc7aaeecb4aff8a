"""Task records (m1flow.data) -> prompts: the one record -> Prompt path that svc_source and the
operator's tools (`m1flow feed`, `m1flow data profile`) share, the dead letter of a bad row, and an SWE
task's spec. Publishing is theirs: this module writes no record."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from m1flow.bus import codec
from m1flow.bus.limits import MESSAGE_MAX_BYTES, record_size
from m1flow.bus.letters import reason
from m1flow.contracts import events
from m1flow.task_store import TaskStore

if TYPE_CHECKING:
    from m1flow.data.dataset import TaskSource
    from m1flow.data.record import TaskRecord


def swe_verifier_spec(store: TaskStore, repo_tar: bytes, fail_to_pass: Sequence[str],
                      pass_to_pass: Sequence[str] = (), **options: object) -> events.VerifierSpec:
    """An SWE task's spec: the repository snapshot goes to the task store once, the spec names it.

    options: test_command, limits (see svc_reward.verifiers.swe.SweTask).
    """
    spec = {"fail_to_pass": list(fail_to_pass), "pass_to_pass": list(pass_to_pass), **options}
    return events.VerifierSpec(kind="swe", spec_json=json.dumps(spec), payload_uri=store.put(repo_tar))


# ---- task records (m1flow.data) -> prompts: one path for svc_source and `m1flow feed --dataset` ----
class BadRow(ValueError):
    """A row that cannot become a prompt: where it is and why (str: 'path:row: field: why')."""

    def __init__(self, path: str, row: int, field: str, why: str) -> None:
        super().__init__(f"{path}:{row}: {field}: {why}")
        self.path, self.row, self.field, self.why = path, row, field, why

    def __reduce__(self):  # picklable, for the source's reader process
        return BadRow, (self.path, self.row, self.field, self.why)


def message_id_for(stream: str, source: str, epoch: int, position: int) -> str:
    """Deterministic in (stream, source, epoch, position): a row published twice (a restart inside
    the lead) carries one id, which consumers dedupe; another epoch of the same row does not."""
    return hashlib.sha1(f"{stream}|{source}|{epoch}|{position}".encode()).hexdigest()[:32]


def prompt_for(record: "TaskRecord", group_size: int, run_id: str, origin: events.SourceCursor | None = None,
               path: str = "", row: int = -1, header: events.Header | None = None) -> events.Prompt:
    """The Prompt of one task record (checked when it was built: its kind known, its gold present),
    stamped with where it was drawn; BadRow when it still cannot become a prompt.
    header: a batch's shared header (with an origin, its message id is replaced by the draw's)."""
    try:
        prompt = record.to_prompt(group_size, run_id=run_id, header=header)
    except (ValueError, TypeError, KeyError) as exc:
        raise BadRow(path or record.source, row, "prompt", str(exc)) from exc
    if not prompt.text:
        raise BadRow(path or record.source, row, "prompt", "empty: no user turn")
    if origin is not None:
        prompt.origin.CopyFrom(origin)
        prompt.header.message_id = message_id_for(origin.stream, origin.source, origin.epoch, origin.position)
    return prompt


# Room for what svc_source stamps on a prompt that a check before any run does not have: the origin
# (source, stream "<run>/<group>", epoch, position, draw, mixture version) and a run id in the header
# longer than the check's (a few hundred bytes for names of up to a hundred characters).
STAMP_ROOM = 512


def prompt_oversize(prompt: events.Prompt) -> str | None:
    """Why the bus would refuse this prompt as svc_source publishes it (None: it fits): its framed
    bytes, keyed by prompt id, with room for the source's stamp, over the broker's record limit
    (m1flow.bus.limits). `data validate` refuses such a row before it can reach the source."""
    encoded = len(codec.encode(prompt))
    size = record_size(prompt.prompt_id, encoded + (0 if prompt.HasField("origin") else STAMP_ROOM))
    if size <= MESSAGE_MAX_BYTES:
        return None
    return (f"the encoded Prompt is {encoded:,} bytes, {size:,} as a record on `prompts`: over the bus's limit of "
            f"{MESSAGE_MAX_BYTES:,} bytes (message.max.bytes), the broker would refuse it")


# ---- the same Prompt as bytes made from parts: svc_source's per-row path ----------------------
Body = tuple[str, bytes]  # (prompt id, the Prompt's fields 2-10 serialized)


def prompt_body(record: "TaskRecord", group_size: int, path: str = "", row: int = -1) -> Body:
    """The record's prompt id and body, with prompt_for's checks (BadRow)."""
    prompt = prompt_for(record, group_size, "", path=path, row=row, header=_NO_HEADER)
    prompt.ClearField("header")
    return prompt.prompt_id, prompt.SerializeToString()


_NO_HEADER = events.Header()


def prompt_bodies(source: "TaskSource", start: int, stop: int, group_size: int,
                  path: str = "") -> Iterator[tuple[int, "Body | Exception"]]:
    """(row, Body or the row's error) of rows start..stop: m1flow-form rows the one-pass check
    proves well formed skip the importer and pydantic (m1flow.data.fastpath), the rest take
    records() and prompt_body, so every bad row still gets its RowError or BadRow."""
    from m1flow.data.dataset import FileSource
    from m1flow.data.fastpath import quick_body
    from m1flow.prompt_wire import BodyWriter
    from m1flow.data.importers import IMPORTERS, import_row
    from m1flow.data.record import RowError

    if not isinstance(source, FileSource) or source.importer not in (IMPORTERS.get("m1flow"), IMPORTERS.get("auto")):
        for row, item in source.records(start, stop):
            yield row, _body_or_error(item, group_size, path, row)
        return
    name, domain, importer, ctx = source.ctx.source, source.ctx.domain, source.importer, source.ctx
    writer = BodyWriter(group_size)
    for row, data in source.table.rows(start, stop):
        if isinstance(data, RowError):
            yield row, data
            continue
        quick = quick_body(data, row, name, writer, domain)
        yield row, quick if quick is not None else \
            _body_or_error(import_row(importer, data, row, ctx), group_size, path, row)


def _body_or_error(item: Any, group_size: int, path: str, row: int) -> "Body | Exception":
    if isinstance(item, Exception):
        return item
    try:
        return prompt_body(item, group_size, path, row)
    except (ValueError, OSError) as exc:
        return exc


def row_letter(error: Exception, source: str, row: int, epoch: int, service: str, group: str,
               run_id: str = "local") -> events.DeadLetter:
    """The dead letter of a bad row: `source_topic` names the source ('source:<name>'), `offset` the
    row, `error` the file's name (not its folders: m1flow.bus.letters), row, field and why; one id
    per (source, epoch, row), so a row met again after a restart is not lettered twice."""
    return events.DeadLetter(
        header=codec.header(service, run_id=run_id, message_id=f"dlq:{group}:{source}:{epoch}:{row}"),
        source_topic=f"source:{source}", partition=epoch, offset=row, error=reason(str(error)), service=service,
        consumer_group=group)

