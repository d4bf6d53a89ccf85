#!/usr/bin/env python3
"""Runs a command under the restrictions of a systemd unit file that this process can
apply by itself (no systemd needed), so that a test can show what the packaged service
lets its children do.

    python3 unit_restrictions.py UNIT_FILE -- COMMAND [ARG...]

Applied when the unit sets them: NoNewPrivileges=yes (PR_SET_NO_NEW_PRIVS) and
MemoryDenyWriteExecute=yes (PR_SET_MDWE with PR_MDWE_REFUSE_EXEC_GAIN, the kernel's own
form of what systemd enforces with seccomp; Linux 6.3 or newer). It prints what it
applied on stderr and exits 3 when the unit asks for something this kernel cannot apply,
so a caller never mistakes an unapplied restriction for a passed test.
"""
import ctypes
import os
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_MDWE = 65
PR_MDWE_REFUSE_EXEC_GAIN = 1


def settings(path):
    """The unit's [Service] settings as name -> last value."""
    found, section = {}, None
    with open(path, encoding="utf-8") as unit:
        for raw in unit:
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
                continue
            if section == "[Service]" and "=" in line:
                name, value = line.split("=", 1)
                found[name.strip()] = value.strip()
    return found


def prctl(libc, option, arg):
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        return ctypes.get_errno()
    return 0


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    unit, command = sys.argv[1], sys.argv[3:]
    wanted = settings(unit)
    libc = ctypes.CDLL(None, use_errno=True)
    yes = lambda name: wanted.get(name, "no").lower() in ("yes", "true", "1", "on")
    applied = []
    if yes("NoNewPrivileges"):
        if prctl(libc, PR_SET_NO_NEW_PRIVS, 1):
            sys.exit(3)
        applied.append("NoNewPrivileges")
    if yes("MemoryDenyWriteExecute"):
        if prctl(libc, PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN):
            print("unit_restrictions: this kernel cannot apply MemoryDenyWriteExecute "
                  "(PR_SET_MDWE needs Linux 6.3)", file=sys.stderr)
            sys.exit(3)
        applied.append("MemoryDenyWriteExecute")
    print("unit_restrictions: applied " + (", ".join(applied) or "nothing"), file=sys.stderr)
    sys.stderr.flush()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
