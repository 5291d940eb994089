"""The one exception type of bad data: a missing or damaged file, an unreadable record, a schema that does not fit."""
from __future__ import annotations


class DataError(ValueError):
    """Any problem with dataset files or raw records; the message is one line naming the file."""
