"""The training loop of the ``recover`` stage (see :mod:`edgeopt.converters.recover`): the data, the loss chosen
from the output kind, the held-back metric each epoch, early stop, the time budget and Ctrl-C.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

TIE = 1e-9


@dataclass
class Job:
    """What training needs, built once: stacked data, the split, the held-back metric, the loss kind."""

    input_names: list[str]
    output_names: list[str]
    x: dict[str, np.ndarray]  # name -> (N, ...) samples stacked on the batch axis
    labels: np.ndarray | None  # (N,) class indices, used only for classifiers
    train_idx: np.ndarray
    held_idx: np.ndarray
    metric: object  # edgeopt.metrics.Metric on the held-back samples (FP32 = ONNX Runtime teacher)
    loss_kind: str  # "kl" (classifier logits) or "mse" (other outputs)
    probabilities: bool  # the classifier's output is already softmaxed: its log is used as logits
    batch_size: int
    checks: dict = field(default_factory=dict)

    @classmethod
    def make(cls, torch, teacher, student, student_path: Path, reference: Path, calib, config,
             threads: int | None = None, search_path: tuple[str, ...] = ()) -> Job:
        from edgeopt.converters.checks import compare
        from edgeopt.errors import StageError
        from edgeopt.metrics import MetricName, make_metric
        from edgeopt.model import graph_inputs, graph_outputs, load_onnx
        from edgeopt.runtime.run_fn import run_fn

        m = load_onnx(student_path, check=False)
        inputs, outputs = [s.name for s in graph_inputs(m)], [s.name for s in graph_outputs(m)]
        feeds = calib.feeds()
        if any(np.ndim(f[n]) == 0 or np.shape(f[n])[0] != 1 for f in feeds[:1] for n in inputs):
            raise StageError("recover: the model's inputs have no batch axis of one", "convert with --no-recover")
        x = {n: np.concatenate([f[n] for f in feeds]) for n in inputs}
        n = len(feeds)
        idx = np.random.default_rng(config.seed).permutation(n)
        k = max(2, int(round(n * config.holdout)))
        held_idx, train_idx = np.sort(idx[:k]), np.sort(idx[k:])
        held = calib.subset(held_idx)
        reference_teacher = run_fn(reference, threads)
        metric = make_metric(reference_teacher, held, config.bound.metric, search_path=list(search_path),
                             role="calib")  # held-back --calib samples, the bound's task metric (--metric)
        job_labels = None
        if calib.labels is not None and metric.kind == MetricName.TOP1:
            lab = np.asarray(calib.labels)
            if lab.ndim == 1 and lab.dtype.kind in "iuf" and np.all(lab == np.round(lab)):
                job_labels = lab.astype(np.int64)
        first = np.asarray(reference_teacher(feeds[0])[outputs[0]])
        prob = bool(np.all(first >= 0) and np.all(first <= 1) and abs(float(first.sum()) - first.shape[0]) < 1e-3)
        job = cls(inputs, outputs, x, job_labels, train_idx, held_idx, metric,
                  "kl" if metric.kind == MetricName.TOP1 else "mse", prob, config.batch_size)
        teacher.eval()
        try:  # a graph with a batch of one baked in (Reshape to [1, -1]) trains one sample at a time
            with torch.no_grad():
                job.forward(student, job.tensors(torch, train_idx[:2]))
                two = job.forward(teacher, job.tensors(torch, train_idx[:2]))
                one = [job.forward(teacher, job.tensors(torch, train_idx[i : i + 1])) for i in range(2)]
            for k, t in enumerate(two):
                if not np.allclose(t.numpy(), np.concatenate([o[k].numpy() for o in one]), rtol=1e-4, atol=1e-4):
                    job.batch_size = 1  # batched outputs differ from single samples: the batch axis is not free
        except Exception:  # noqa: BLE001 - any failure at batch 2 means: batch of one
            job.batch_size = 1
        teacher.eval()  # BatchNormalization left unfolded uses its running statistics, as ONNX Runtime does
        check_feeds = [{nm: x[nm][i : i + 1] for nm in inputs} for i in held_idx[:8]]
        job.checks["teacher_torch_vs_reference"] = compare(reference_teacher, job.runner(torch, teacher), check_feeds)
        return job

    def tensors(self, torch, idx, shift: tuple[int, int] | None = None) -> dict:
        out = {}
        for n in self.input_names:
            a = self.x[n][idx]
            if shift is not None and a.ndim == 4 and a.dtype.kind == "f":
                a = _shift(a, *shift)
            out[n] = torch.from_numpy(np.ascontiguousarray(a))
        return out

    def forward(self, module, tensors: dict) -> list:
        out = module(*[tensors[n] for n in self.input_names])
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def runner(self, torch, module):
        def run(feed):
            with torch.no_grad():
                outs = self.forward(module, {k: torch.from_numpy(np.asarray(v)) for k, v in feed.items()})
            return {nm: o.numpy() for nm, o in zip(self.output_names, outs, strict=True)}

        return run

    def loss(self, torch, s: list, t: list, labels=None, temperature: float = 4.0, label_weight: float = 0.5):
        F = torch.nn.functional
        if self.loss_kind == "kl":
            ls, lt = (s[0].flatten(1), t[0].flatten(1))
            if self.probabilities:
                ls, lt = ls.clamp_min(1e-8).log(), lt.clamp_min(1e-8).log()
            kd = F.kl_div(F.log_softmax(ls / temperature, 1), F.log_softmax(lt / temperature, 1),
                          reduction="batchmean", log_target=True) * temperature**2
            if labels is None:
                return kd
            return (1 - label_weight) * kd + label_weight * F.cross_entropy(ls, labels)
        total = 0.0
        for a, b in zip(s, t, strict=True):
            if a.is_floating_point():
                total = total + F.mse_loss(a, b) / (b.var().detach() + 1e-8)
        return total

    def held_outputs(self, torch, module) -> list:
        """``module``'s outputs on the held-back samples, batched (eval mode), one tensor per output."""
        module.eval()
        bs, parts = max(1, self.batch_size), []
        with torch.no_grad():
            for i in range(0, len(self.held_idx), bs):
                parts.append(self.forward(module, self.tensors(torch, self.held_idx[i : i + bs])))
        return [torch.cat([p[k] for p in parts]) for k in range(len(parts[0]))]

    def score(self, torch, module, teacher_held=None, temperature: float = 4.0) -> tuple[float, float | None]:
        """(the task metric on the held-back samples, the distillation loss there when ``teacher_held`` is given:
        it breaks ties of a saturated metric, e.g. 100 % agreement with FP32). The metric gets what every caller
        of a metric hands it: one ``{output: array}`` per sample, as the model returns it for that sample's feed
        (never a slice of a batched output, which a model without a free batch axis would cut wrongly)."""
        module.eval()
        per_sample = []
        with torch.no_grad():
            for i in self.held_idx:
                per_sample.append(self.forward(module, self.tensors(torch, np.arange(i, i + 1))))
        loss = None
        if teacher_held is not None:
            outs = [torch.cat([p[k] if p[k].ndim else p[k].reshape(1) for p in per_sample])
                    for k in range(len(per_sample[0]))]
            with torch.no_grad():
                loss = float(self.loss(torch, outs, teacher_held, None, temperature))
        dicts = [{nm: o.numpy() for nm, o in zip(self.output_names, outs_i, strict=True)} for outs_i in per_sample]
        return self.metric.score_outputs(dicts), loss


def _shift(a: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """Zero-padded shift of the spatial axes (NCHW, or NHWC when the last axis looks like channels)."""
    sp = (1, 2) if a.shape[-1] in (1, 3, 4) and a.shape[1] not in (1, 3, 4) else (2, 3)
    out = np.roll(a, (dy, dx), axis=sp)
    ys = [slice(None)] * 4
    if dy:
        ys[sp[0]] = slice(0, dy) if dy > 0 else slice(dy, None)
        out[tuple(ys)] = 0
        ys[sp[0]] = slice(None)
    if dx:
        ys[sp[1]] = slice(0, dx) if dx > 0 else slice(dx, None)
        out[tuple(ys)] = 0
    return out


@dataclass
class Result:
    best_state: dict
    best_value: float
    start_value: float
    best_epoch: int
    epochs: int
    stopped: str  # early-stop | budget | max-epochs | interrupted
    history: list[dict]

    @property
    def improved(self) -> bool:
        return self.best_epoch > 0

    def report(self, job: Job, seconds: float) -> dict:
        m = job.metric
        return {"changed": self.improved, "metric": m.name, "metric_unit": m.unit,
                "metric_basis": "labels" if m.labels_used else "fp32",
                "held_back_samples": len(job.held_idx), "train_samples": len(job.train_idx),
                "held_metric_fp32": m.fp32_value, "held_metric_pruned": self.start_value,
                "held_metric_recovered": self.best_value, "best_epoch": self.best_epoch, "epochs": self.epochs,
                "stopped": self.stopped, "loss": job.loss_kind + ("+ce" if job.labels is not None else ""),
                "labels_used": job.labels is not None, "batch_size": job.batch_size,
                "recovery_seconds": round(seconds, 3), "history": self.history, **job.checks}


def distill(torch, job: Job, teacher, student, config, deadline: float, progress=None, on_epoch=None) -> Result:
    """Train ``student`` towards ``teacher``; returns the best student's state (by the held-back metric).
    ``on_epoch(epoch, value)`` is called after each scored epoch (a hook for callers and tests)."""
    from contextlib import nullcontext

    rng = np.random.default_rng(config.seed)
    torch.manual_seed(config.seed)
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(student.parameters(), lr=config.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=config.max_epochs)
    sign = 1.0 if job.metric.higher_is_better else -1.0
    t_held = job.held_outputs(torch, teacher)
    value, held_loss = job.score(torch, student, t_held, config.temperature)
    start, best, best_state, best_epoch, since = value, value, copy.deepcopy(student.state_dict()), 0, 0
    best_loss = held_loss
    history = [{"epoch": 0, "held_metric": value, "held_loss": held_loss}]
    stopped, epoch = "max-epochs", 0
    bar_cm = progress(f"recover: held-back {job.metric.name} {value:.4g}", config.max_epochs) if progress else nullcontext()
    with bar_cm as bar:
        try:
            for epoch in range(1, config.max_epochs + 1):
                t0, losses = time.perf_counter(), []
                student.train()
                order = rng.permutation(job.train_idx)
                for i in range(0, len(order), job.batch_size):
                    if time.perf_counter() > deadline:
                        stopped = "budget"
                        break
                    idx = np.sort(order[i : i + job.batch_size])
                    s_px = config.shift_px
                    shift = tuple(int(v) for v in rng.integers(-s_px, s_px + 1, 2)) if s_px else None
                    xb = job.tensors(torch, idx, shift)
                    with torch.no_grad():
                        t = job.forward(teacher, xb)
                    y = torch.from_numpy(job.labels[idx]) if job.labels is not None else None
                    loss = job.loss(torch, job.forward(student, xb), t, y, config.temperature, config.label_weight)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    losses.append(float(loss.detach()))
                sched.step()
                if stopped == "budget" and not losses:
                    epoch -= 1
                    break
                value, held_loss = job.score(torch, student, t_held, config.temperature)
                row = {"epoch": epoch, "loss": float(np.mean(losses)), "held_metric": value, "held_loss": held_loss,
                       "seconds": round(time.perf_counter() - t0, 3)}
                history.append(row)
                if bar is not None:
                    bar.describe(f"recover epoch {epoch}: loss {row['loss']:.4f}, held-back {job.metric.name} "
                                 f"{value:.4g}{job.metric.unit} (FP32 {job.metric.fp32_value:.4g})")
                    bar.advance()
                if sign * (value - best) > TIE or (abs(value - best) <= TIE and held_loss < best_loss * (1 - 1e-3)):
                    best, best_state, best_epoch, since = value, copy.deepcopy(student.state_dict()), epoch, 0
                    best_loss = held_loss
                else:
                    since += 1
                if on_epoch is not None:
                    on_epoch(epoch, value)
                if stopped == "budget":
                    break
                if since >= config.patience:
                    stopped = "early-stop"
                    break
        except KeyboardInterrupt:
            stopped = "interrupted"
    return Result(best_state, best, start, best_epoch, epoch, stopped, history)
