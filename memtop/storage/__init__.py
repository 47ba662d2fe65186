"""Recordings on disk: the SQLite store (writer and reader) and its column blocks."""
