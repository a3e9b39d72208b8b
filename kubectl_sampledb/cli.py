"""`kubectl sampledb` (the console script kubectl-sampledb, which kubectl finds on PATH as a plugin).

kubectl hands a plugin every argument after its name, so the cluster flags (--kubeconfig, --context,
-n/--namespace) are accepted before and after the command. Anything after `--` goes to psql.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from . import actions, logs, render, shell
from .errors import CliError
from .kube import Cluster, connect
from .status import gather

Connect = Callable[[str | None, str | None, str | None], Cluster]


@dataclass
class Console:
    """Where a command reads and writes; tests give their own."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    execvp: Callable[[str, list[str]], object] = os.execvp


def build_parser() -> argparse.ArgumentParser:
    # SUPPRESS: a flag given after the command must not be reset by the command's own default
    cluster = argparse.ArgumentParser(add_help=False)
    cluster.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="kubeconfig file (default: as kubectl)")
    cluster.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context (default: the current one)")
    cluster.add_argument("-n", "--namespace", default=argparse.SUPPRESS,
                         help="namespace (default: the context's, else default)")

    p = argparse.ArgumentParser(prog="kubectl sampledb", parents=[cluster],
                                description="Look at and operate SampleDB PostgreSQL databases.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[cluster], help=help, description=help)

    s = command("status", "phase, conditions, servers with replication lag, Services, backups, the operator's last run")
    s.add_argument("name", help="the SampleDB")
    s.add_argument("-o", "--output", choices=("text", "json"), default="text")
    s.add_argument("--backups", type=int, default=5, metavar="N", help="how many of the last backups (default: 5)")
    s.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="auto: on a terminal unless NO_COLOR is set")

    b = command("backup", "take an on-demand backup and follow it until Completed or Failed")
    b.add_argument("name", help="the SampleDB")
    b.add_argument("--backup-name", help="name of the SampleDBBackup (default: NAME-<UTC time>)")
    _follow_flags(b, timeout=1800)

    r = command("restore", "create a new SampleDB from a backup (spec.restoreFrom) and follow it until Ready")
    r.add_argument("backup", help="the SampleDBBackup")
    r.add_argument("--to", required=True, metavar="NEW", help="name of the new SampleDB")
    r.add_argument("--version", help="PostgreSQL version (default: the backed-up database's; needed if it is gone)")
    r.add_argument("--replicas", type=int, help="servers (default: the backed-up database's)")
    _follow_flags(r, timeout=1800)

    w = command("switchover", "make another server the primary and follow until it is")
    w.add_argument("name", help="the SampleDB")
    w.add_argument("--to", required=True, metavar="SERVER", help="the server (pod) to promote, e.g. NAME-2")
    _follow_flags(w, timeout=300)

    q = command("psql", "psql in the primary (or a replica); arguments after -- go to psql")
    q.add_argument("name", help="the SampleDB")
    which = q.add_mutually_exclusive_group()
    which.add_argument("--replica", action="store_true", help="a Ready replica instead of the primary")
    which.add_argument("--server", metavar="POD", help="this server")

    g = command("logs", "the servers' logs together, each line prefixed with its pod")
    g.add_argument("name", help="the SampleDB")
    g.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    g.add_argument("--tail", type=int, metavar="N", help="only the last N lines of each server (default: all; 10 with -f)")
    g.add_argument("--server", metavar="POD", help="only this server")
    return p


def _follow_flags(p: argparse.ArgumentParser, timeout: float) -> None:
    p.add_argument("--no-wait", action="store_true", help="return once the request is made")
    p.add_argument("--timeout", type=float, default=timeout, metavar="SECONDS",
                   help=f"give up following after this long (default: {timeout:g})")


def _split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def main(argv: Sequence[str] | None = None, *, console: Console | None = None,
         connect_fn: Connect = connect) -> int:
    console = console or Console()
    args_list, extra = _split_extra(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(args_list)
    if extra and args.command != "psql":
        parser.error(f"{args.command} takes no arguments after --")
    try:
        cluster = connect_fn(getattr(args, "kubeconfig", None), getattr(args, "context", None),
                             getattr(args, "namespace", None))
        return COMMANDS[args.command](cluster, args, extra, console)
    except CliError as exc:
        console.out.flush()
        print(f"error: {exc}", file=console.err, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, and keep the interpreter's final flush from complaining
        if console.out is sys.stdout:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _status(cluster: Cluster, args: argparse.Namespace, extra: list[str], console: Console) -> int:
    st = gather(cluster, args.name, backups=args.backups)
    if args.output == "json":
        console.out.write(render.render_json(st))
    else:
        console.out.write(render.render_text(st, colour=render.use_colour(console.out, args.color)))
    console.out.flush()
    return 0


def _follow(args: argparse.Namespace, console: Console) -> actions.Follow:
    return actions.Follow(wait=not args.no_wait, timeout=args.timeout, out=console.out)


def _backup(cluster: Cluster, args: argparse.Namespace, extra: list[str], console: Console) -> int:
    actions.backup(cluster, args.name, _follow(args, console), name=args.backup_name)
    return 0


def _restore(cluster: Cluster, args: argparse.Namespace, extra: list[str], console: Console) -> int:
    actions.restore(cluster, args.backup, args.to, _follow(args, console), version=args.version,
                    replicas=args.replicas)
    return 0


def _switchover(cluster: Cluster, args: argparse.Namespace, extra: list[str], console: Console) -> int:
    actions.switchover(cluster, args.name, args.to, _follow(args, console))
    return 0


def _psql(cluster: Cluster, args: argparse.Namespace, extra: list[str], console: Console) -> int:
    pod = shell.choose_server(cluster, args.name, replica=args.replica, server=args.server)
    tty = bool(getattr(console.stdin, "isatty", None) and console.stdin.isatty())
    argv = shell.psql_argv(shell.find_kubectl(), cluster.target, pod, extra, tty)
    console.out.flush()
    console.err.flush()
    try:
        console.execvp(argv[0], argv)  # replaces this process: kubectl owns the terminal from here
    except OSError as exc:
        raise CliError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    return 0


def _logs(cluster: Cluster, args: argparse.Namespace, extra: list[str], console: Console) -> int:
    if args.follow:
        logs.follow_logs(cluster, args.name, console.out, console.err,
                         tail=10 if args.tail is None else args.tail, server=args.server)
    else:
        logs.print_logs(cluster, args.name, console.out, console.err, tail=args.tail, server=args.server)
    return 0


COMMANDS: dict[str, Callable[[Cluster, argparse.Namespace, list[str], Console], int]] = {
    "status": _status, "backup": _backup, "restore": _restore, "switchover": _switchover, "psql": _psql,
    "logs": _logs}


if __name__ == "__main__":
    sys.exit(main())
