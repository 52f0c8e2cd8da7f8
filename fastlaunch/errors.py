"""Exceptions raised by fastlaunch."""


class TracingError(Exception):
    """The traced function did something that cannot be recorded as a static array program."""
