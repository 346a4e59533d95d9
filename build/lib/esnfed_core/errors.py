"""Error types the CLI maps to one-line messages and non-zero exit codes."""


class EsnfedError(Exception):
    """Base of every expected failure: the message names the file or key and the problem."""


class DataError(EsnfedError):
    """An input file is missing, unreadable, malformed, or holds unusable values."""


class ConfigError(EsnfedError):
    """A params.yaml entry or a command option is invalid."""
