"""Errors a user can cause (bad file, bad flag): the CLI prints one line and exits 2."""


class UserError(Exception):
    pass
