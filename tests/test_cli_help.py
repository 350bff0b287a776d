"""`ina --help` is the reference: every subcommand and argument of the whole tree (plugins
included) says what it is for, and README.md's command table lists every subcommand."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from controller.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every (sub)command as (its words after `ina`, its parser), the root first."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*words, name))


def _subcommand_helps(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    return {
        choice.dest: choice.help
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for choice in action._choices_actions
    }


def test_the_walk_sees_the_plugins():
    words = {" ".join(w) for w, _ in _commands(build_parser())}
    assert {
        "solve",
        "topo gen leaf-spine",
        "switch",
        "bench aro",
        "bench e2e",
        "bench failover",
        "dataplane-demo",
    } <= words


def test_every_subcommand_and_argument_has_help():
    missing = []
    for words, parser in _commands(build_parser()):
        for name, text in _subcommand_helps(parser).items():
            if not (text and text.strip()):
                missing.append(f"ina {' '.join((*words, name))} (the command)")
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if action.help == argparse.SUPPRESS:
                continue
            if not (action.help and action.help.strip()):
                flag = "/".join(action.option_strings) or action.dest
                missing.append(f"ina {' '.join(words)} {flag}")
    assert not missing, "arguments without help:\n" + "\n".join(missing)


def _readme_usages() -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """README.md's command table, first column: each `ina WORD... ARGS` as (the command's
    words, one per `a|b` alternative spelled out, and the rest of the usage's tokens)."""
    text = (ROOT / "README.md").read_text()
    table = text.split("| command | what it does |", 1)[1].split("\n\n", 1)[0]
    for row in table.splitlines()[2:]:
        first = row.split(" | ", 1)[0]
        for usage in re.findall(r"`ina ([^`]*)`", first):
            tokens = usage.replace("\\|", "|").split()
            words = []
            while tokens and re.fullmatch(r"[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*", tokens[0]):
                words.append(tokens.pop(0).split("|"))
            prefixes: list[tuple[str, ...]] = [()]
            for options in words:
                prefixes = [(*p, o) for p in prefixes for o in options]
            for prefix in prefixes:
                yield prefix, tokens


def _readme_commands() -> set[str]:
    return {" ".join(words[:i]) for words, _ in _readme_usages() for i in range(1, len(words) + 1)}


def test_readme_options_are_the_parsers_and_required_only_where_they_are():
    """A flag README shows outside brackets is one the command requires, and every flag it
    shows is one the command has."""
    parsers = dict(_commands(build_parser()))
    wrong = []
    for words, tokens in _readme_usages():
        parser = parsers[words]
        options = {o: a for a in parser._actions for o in a.option_strings}
        depth = 0
        for token in tokens:
            flag = re.match(r"\[*(--?[a-zA-Z][\w-]*)", token)
            if flag and flag.group(1) not in options:
                wrong.append(f"ina {' '.join(words)}: {flag.group(1)} is no option of it")
            elif flag and depth == token.count("[") == 0 and not options[flag.group(1)].required:
                wrong.append(
                    f"ina {' '.join(words)}: {flag.group(1)} is optional, shown as required"
                )
            depth += token.count("[") - token.count("]")
        required = {a.option_strings[0] for a in parser._actions if a.required and a.option_strings}
        shown = {m for t in tokens for m in re.findall(r"--?[a-zA-Z][\w-]*", t)}
        wrong += [
            f"ina {' '.join(words)}: required {o} not shown"
            for o in required
            if not {o, *options[o].option_strings} & shown and "..." not in tokens
        ]
    assert not wrong, "\n".join(wrong)


def test_readme_names_every_subcommand():
    named = _readme_commands()
    missing = [
        " ".join(words)
        for words, _ in _commands(build_parser())
        if words and " ".join(words) not in named
    ]
    assert not missing, "README.md's command table lacks: " + ", ".join(missing)
