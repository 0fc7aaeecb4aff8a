"""Task data: one record per row whatever the file format, streamed readers, importers, generators.

    from m1flow.data import DatasetConfig, open_source
    source = open_source(DatasetConfig(path="gsm8k.parquet", kinds={"openai/gsm8k": "math"}))
    for row, record in source.records():      # TaskRecord, or a RowError naming file, row and field
        prompt = record.to_prompt(group_size=8)

docs/tasks.md describes the record, the schema of each verifier kind and the formats.
"""
from m1flow.data.dataset import DEFAULT_KINDS, DatasetConfig, TaskSource, open_source
from m1flow.data.readers import READERS, Table, TableError, open_table
from m1flow.data.record import Message, RowError, SpecError, TaskRecord, Verifier

__all__ = ["DEFAULT_KINDS", "READERS", "DatasetConfig", "Message", "RowError", "SpecError", "Table",
           "TableError", "TaskRecord", "TaskSource", "Verifier", "open_source", "open_table"]
