"""Each option declared once, reachable from every door.

A stage's options are declared in its config (``user_option``: type, default, checks, description); the chain-level
ones (backend, precision, quant_mode, pruning, threads…) in ``ChainOptions`` (``chain_option``), which the stages read;
the accuracy bound's in ``AccuracyBound``. ``ChainRequest`` (so the recipe, the pipeline's targets and the API's
keywords) and the CLI flags are generated from those declarations. These tests walk every stage config and check
that no option is declared twice, that no default is written twice, and that every field can be set from the API, a
recipe and the command line.
"""

from __future__ import annotations

import json

import pytest
import yaml
from pydantic import BaseModel

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import ChainOptions, StageConfig, is_chain_option, option_name
from edgeopt.options import (
    ChainRequest,
    ConvertOptions,
    _ChainRequestBase,
    from_keywords,
    stage_declared_options,
)
from edgeopt.plan import Recipe, make_plan
from edgeopt.profiles import load_profile

CHAIN_LEVEL = set(_ChainRequestBase.model_fields)
# the chain-level options declared in ChainOptions (all of CHAIN_LEVEL but the request-only memory_budget)
DECLARED_IN_OPTIONS = {n for n, f in ChainOptions.model_fields.items() if is_chain_option(f)}


def _all_stage_configs() -> dict[str, type[StageConfig]]:
    from edgeopt.converters.registry import backend_names, get_backend, get_stage, stage_names

    configs = {name: get_stage(name).Config for name in stage_names()}
    configs.update({b.value: get_backend(b).Config for b in backend_names()})
    return configs


def _declarations() -> list[tuple[str, str, str]]:
    """(config, field, option) of every field that declares a user option, in every stage config and the bound."""
    out = []
    for config in [*_all_stage_configs().values(), AccuracyBound]:
        for field_name, info in config.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            if config is AccuracyBound or extra.get("declares"):
                out.append((config.__name__, field_name, option_name(field_name, info) or field_name))
    return out


def test_every_option_is_declared_once_and_the_request_is_generated_from_it():
    decls = _declarations()
    names = [option for _, _, option in decls]
    assert len(names) == len(set(names)), f"an option declared twice: {sorted(names)}"
    assert not set(names) & CHAIN_LEVEL  # a chain-level option is never also a stage's declaration
    assert set(ChainRequest.model_fields) == CHAIN_LEVEL | set(names)
    declared = stage_declared_options()
    for _, _, option in decls:  # the request's field is the declaration's: same description and checks
        mine, theirs = ChainRequest.model_fields[option], declared[option]
        assert mine.description == theirs.description and mine.description
        assert mine.metadata == theirs.metadata and mine.default is None
    for name in CHAIN_LEVEL:
        assert ChainRequest.model_fields[name].description, name


def _redeclared(classes) -> dict[str, set[str]]:
    """The chain-level options a class in ``classes`` declares itself (in its own body) besides ChainOptions."""
    out = {}
    for cls in classes:
        own = set(vars(cls).get("__annotations__", {})) & (DECLARED_IN_OPTIONS | set(stage_declared_options()))
        if own:
            out[cls.__name__] = own
    return out


def _request_classes():
    from edgeopt.pipeline.recipe import Target

    return [_ChainRequestBase, ConvertOptions, Recipe, Target]  # (ChainRequest's own fields are the generated ones)


def test_chain_level_options_are_declared_once_in_chain_options_and_the_request_is_generated():
    assert DECLARED_IN_OPTIONS >= {"backend", "precision", "quant_mode", "prune", "prune_mode", "recover", "threads"}
    assert CHAIN_LEVEL - DECLARED_IN_OPTIONS == {"memory_budget"}  # read by convert's memory gate, by no stage
    for name in DECLARED_IN_OPTIONS:  # the request's field is the declaration's: description, checks, "not given"
        mine, theirs = ChainRequest.model_fields[name], ChainOptions.model_fields[name]
        assert mine.description == theirs.description and mine.description, name
        assert mine.default == ({} if isinstance(theirs.default, dict) else None), name
        if name not in ChainOptions.asked_as:
            given = theirs.annotation if isinstance(theirs.default, dict) else theirs.annotation | None
            assert mine.metadata == theirs.metadata and mine.annotation == given, name
    assert not _redeclared(_request_classes())


def test_a_chain_level_option_declared_a_second_time_is_caught():
    from pydantic import Field

    from edgeopt.enums import QuantMode

    class Again(ConvertOptions):  # what a second declaration looks like
        quant_mode: QuantMode | None = Field(default=None, description="the kind of INT8")

    assert _redeclared([*_request_classes(), Again]) == {"Again": {"quant_mode"}}
    for config in _all_stage_configs().values():  # a stage may take a chain-level option, never declare it
        for field_name, info in config.model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            assert not (extra.get("declares") and option_name(field_name, info) in DECLARED_IN_OPTIONS)
            assert not is_chain_option(info), (config.__name__, field_name)


def test_a_stage_field_taking_a_chain_level_option_has_the_declarations_default():
    for config in _all_stage_configs().values():
        for field_name, info in config.model_fields.items():
            option = option_name(field_name, info)
            declared = ChainOptions.model_fields.get(option or "")
            if declared is not None and is_chain_option(declared) and not declared.is_required():
                assert info.default == declared.default, (config.__name__, field_name, info.default)


def _default_writes(text: str, default: str) -> list[str]:
    """Lines of ``text`` that write ``default`` as a default: a field's or a parameter's (``x: T = D``,
    ``from_option(name, D)``), a fallback (``_pick(v, D)``, ``.get(k, D)``, ``v or D``)."""
    import re

    d = re.escape(default)
    pattern = re.compile(rf"(?<![=!<>])=\s*{d}\b|(?:_pick|from_option|\.get)\([^)]*,\s*{d}\)|\bor\s+{d}\b")
    return [line.strip() for line in text.splitlines() if pattern.search(line)]


def test_each_default_is_written_once():
    """The quant-mode, prune-mode and budget defaults are written in their declarations only: nowhere in the
    product is one given again as a field's or a parameter's default, or as a fallback for "not given"."""
    from pathlib import Path

    from edgeopt.converters.accuracy_bound import SEARCH_BUDGET_S

    repo = Path(__file__).resolve().parents[2]
    sources = {p: p.read_text() for d in ("edgeopt", "converters") for p in sorted((repo / d).rglob("*.py"))}
    written = {}
    for name in ("quant_mode", "prune_mode"):
        d = ChainOptions.model_fields[name].default
        written[name] = [(p.name, ln) for p, t in sources.items() for ln in _default_writes(t, f"{type(d).__name__}.{d.name}")]
    written["search_budget"] = [(p.name, ln) for p, t in sources.items()
                                for ln in _default_writes(t, repr(SEARCH_BUDGET_S)) if "budget" in ln.lower() and "recover" not in ln.lower()]
    assert AccuracyBound.model_fields["search_budget"].default == SEARCH_BUDGET_S
    assert written == {"quant_mode": [], "prune_mode": [], "search_budget": [("accuracy_bound.py", f"SEARCH_BUDGET_S = {SEARCH_BUDGET_S!r}")]}
    # and the checker sees one: the lines the planner and the stage configs had before
    assert _default_writes('q = _enum(QuantMode, _pick(r.quant_mode, QuantMode.AUTO), "--quant-mode")', "QuantMode.AUTO")
    assert _default_writes('    mode: QuantMode = from_option("quant_mode", QuantMode.AUTO)', "QuantMode.AUTO")
    assert _default_writes("    quant_mode: QuantMode = QuantMode.AUTO  # --quant-mode", "QuantMode.AUTO")
    assert not _default_writes("if mode in (QuantMode.STATIC, QuantMode.AUTO) or mode == QuantMode.AUTO:", "QuantMode.AUTO")


def test_the_pipelines_accuracy_gate_is_the_bounds_declaration():
    from edgeopt.pipeline.recipe import Gates

    mine, theirs = Gates.model_fields["max_accuracy_drop"], AccuracyBound.model_fields["max_accuracy_drop"]
    assert (mine.description, mine.metadata, mine.default) == (theirs.description, theirs.metadata, theirs.default)


def test_fields_filled_from_an_option_name_one_that_exists():
    for config in _all_stage_configs().values():
        for field_name, info in config.model_fields.items():
            option = option_name(field_name, info)
            if option is not None:
                assert option in ChainRequest.model_fields, (config.__name__, field_name, option)


def test_chain_options_redeclare_no_user_option():
    """The planner's resolved options hold the chain-level values, the bound and the stages' given options, not
    copies of a stage's declarations under other names (``recover_budget_s``, ``per_channel``…)."""
    stage_options = set(stage_declared_options())
    assert not stage_options & set(ChainOptions.model_fields)
    assert {"bound", "given"} <= set(ChainOptions.model_fields)


def test_the_request_rejects_a_bad_value_of_a_generated_option_naming_its_flag():
    from edgeopt.errors import UsageError

    with pytest.raises(UsageError) as e:
        from_keywords(ConvertOptions, {"search_fraction": 1.5})
    assert "--search-fraction" in e.value.message
    with pytest.raises(UsageError) as e:
        from_keywords(ConvertOptions, {"recover_budget": 0})
    assert "--recover-budget" in e.value.message


def _leaves(config: type[BaseModel], instance: BaseModel, prefix: tuple[str, ...] = ()):
    """(path, value) of every leaf field of ``instance`` (sub-configs walked), its default value."""
    for field_name in config.model_fields:
        value = getattr(instance, field_name)
        if isinstance(value, BaseModel):
            yield from _leaves(type(value), value, (*prefix, field_name))
        else:
            yield (*prefix, field_name), value


def _nested(path: tuple[str, ...], value) -> dict:
    out = value
    for part in reversed(path):
        out = {part: out}
    return out


def _merge(into: dict, more: dict) -> dict:
    for k, v in more.items():
        into[k] = _merge(into.get(k, {}), v) if isinstance(v, dict) and v and isinstance(into.get(k), dict) else v
    return into


# the planner settles these after the overrides (their identity is computed, not asked for)
# (--prune auto's recover config is the recover stage's, whose fields stages.recover reaches)
SETTLED = {("tvm", "tuning_db_sha256"), ("prune", "auto_recover_config")}
# set to the plan's own value: another one would make the dry run refuse the model (a shape it does not have)
KEPT = {("normalize", "input_shapes"), ("prune", "criterion")}  # criterion: an enum of one
# fields the generator has no other value for: one each accepts
KNOWN_GOOD: dict[str, object] = {"metric": {"name": "top1"},  # by field name: a MetricSpec is a sub-config
                                  "int8_activation_hints": ["f16"],  # a tuple of enums; planned () or ("bf16",)
                                  "micro": {"cpu": "cortex-m7"}}  # a sub-config, None on the host profile
# plans that between them run every stage (the backend's stage is named after it)
PLANS = [dict(backend="onnxruntime", precision="int8", prune=0.3, recover=True),
         dict(backend="openvino", precision="int8"), dict(backend="tflite", precision="int8"),
         dict(backend="tvm", precision="fp32", early_exit="auto")]


def _candidates(value, annotation):
    """Other values than ``value`` a field of type ``annotation`` may take, most likely valid first."""
    import enum
    import typing

    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
    if enums:
        return [m.value for m in enums[0] if m.value != value]
    if isinstance(value, bool) or bool in args:
        return [not value]
    if isinstance(value, int) or (value is None and int in args):
        return [(value or 0) + 1, (value or 0) + 2]
    if isinstance(value, float) or (value is None and float in args):
        v = value or 0.0
        return [v / 2 if v else 0.25, v * 2 if v else 0.5, v + 0.01]
    if isinstance(value, str) or (value is None and str in args):
        return [(value or "") + "x"]
    if value is None and any(typing.get_origin(a) in (tuple, list) for a in args):
        return [["x"]]
    if isinstance(value, (list, tuple)):
        return [list(value[:-1])] if value else [["x"]]
    if isinstance(value, dict):  # a mapping override merges key by key: a new key shows it arrived
        return [{"edgeopt_test": 1}]
    return []


def _changed(config: type[BaseModel], instance: BaseModel, path: tuple[str, ...], value):
    """A value for the leaf at ``path`` other than ``value`` that the config accepts (None: none found)."""
    owner = instance
    for part in path[:-1]:
        owner = getattr(owner, part)
    annotation = type(owner).model_fields[path[-1]].annotation
    for candidate in _candidates(value, annotation):
        try:
            config.model_validate(_merge(json.loads(instance.model_dump_json()), _nested(path, candidate)))
        except ValueError:
            continue
        return candidate
    return None


def _every_field_changed(plan) -> tuple[dict[str, dict], set]:
    """Every leaf field of every stage in ``plan``, set to a value other than the plan's that the field accepts;
    and the fields no such value was found for."""
    overrides: dict[str, dict] = {}
    unchanged = set()
    for spec in plan.stages:
        for path, value in _leaves(type(spec.config), spec.config):
            if (spec.name, path[-1]) in SETTLED | KEPT:
                continue
            new = KNOWN_GOOD.get(path[-1], _changed(type(spec.config), spec.config, path, value))
            if new is None:
                unchanged.add((spec.name, ".".join(path)))
                continue
            _merge(overrides.setdefault(spec.name, {}), _nested(path, json.loads(json.dumps(new, default=str))))
    return overrides, unchanged


def _config_leaves(stages: list[dict]) -> dict[str, dict]:
    return {s["name"]: s["config"] for s in stages}


@pytest.mark.onnxruntime
@pytest.mark.openvino
@pytest.mark.tflite
@pytest.mark.tvm
def test_every_stage_config_field_is_reachable_from_the_api_a_recipe_and_the_command_line(tmp_path, cli, digits_model,
                                                                                           digits_calib):
    from edgeopt.converters.recover import train_extra_missing

    if train_extra_missing():
        pytest.skip("the recover stage needs the train extra")
    host = load_profile("host")
    seen: set[tuple[str, str]] = set()
    for kw in PLANS:
        planned = make_plan(host, **kw)
        overrides, unchanged = _every_field_changed(planned)
        assert not unchanged, f"no other valid value found for {sorted(unchanged)}"
        api = make_plan(host, **kw, stages=overrides)  # the API's keywords
        recipe_file = tmp_path / "r.yaml"
        recipe_file.write_text(yaml.safe_dump({"stages": overrides}))
        recipe = make_plan(host, **kw, recipe=recipe_file)
        sets = [f"--set={'.'.join((stage, *path))}={json.dumps(value)}"
                for stage, fields in overrides.items() for path, value in _flat(fields)]
        flags = [f"--{k.replace('_', '-')}={v}" if not isinstance(v, bool) else f"--{k}" for k, v in kw.items()]
        proc = cli("convert", str(digits_model), "--dry-run", "--json", "--calib", str(digits_calib), *flags, *sets)
        assert proc.returncode == 0, proc.stderr[-1500:]
        from_cli = _config_leaves(json.loads(proc.stdout)["plan"]["stages"])
        for plan in (api, recipe):
            assert _config_leaves([s.to_json() for s in plan.stages]) == from_cli
        before = _config_leaves([s.to_json() for s in planned.stages])
        for stage, fields in overrides.items():  # each field now holds the value asked for, not the plan's own
            for path, value in _flat(fields):
                got, was = _at(from_cli[stage], path), _at(before[stage], path)
                assert got == value != was, (stage, path, value, got, was)
        for stage, fields in overrides.items():
            seen |= {(stage, path[0]) for path, _ in _flat(fields)}
    every = {(name, f) for name, config in _all_stage_configs().items() for f in config.model_fields}
    missing = every - seen - SETTLED - KEPT
    assert not missing, f"stage config fields no plan above reaches: {sorted(missing)}"


def _at(config: dict | None, path: tuple[str, ...]):
    for part in path:
        config = config.get(part) if isinstance(config, dict) else None
    return config


def _flat(fields: dict, prefix: tuple[str, ...] = ()):
    for k, v in fields.items():
        if isinstance(v, dict) and v:
            yield from _flat(v, (*prefix, k))
        else:
            yield (*prefix, k), v


def test_a_recipe_is_the_request():
    """The recipe file's schema is the request's: every option, nothing else."""
    assert set(Recipe.model_fields) == set(ChainRequest.model_fields)
