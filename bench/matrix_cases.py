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
  words from the package's own homograph list (``</s>`` then ``<pad>`` up to 12 tokens).

None is human-labelled: the metric is agreement with FP32 (cosine for the embedding, top-1 for the rest).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from real_models import Case, _pkg_file

from edgeopt.data import Dataset

SR, N_FFT, HOP, N_MELS, FRAMES = 16000, 400, 160, 40, 160  # resemblyzer's hparams


def _slaney_mel(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """librosa's default mel filterbank (Slaney scale and area normalisation), [n_mels, n_fft//2+1]."""
    def hz_to_mel(f):
        f = np.asarray(f, np.float64)
        lin = f / (200.0 / 3)
        log = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
        return np.where(f >= 1000.0, log, lin)

    def mel_to_hz(m):
        m = np.asarray(m, np.float64)
        return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * (200.0 / 3))

    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    fb = np.zeros((n_mels, len(freqs)))
    for i in range(n_mels):
        lo, mid, hi = edges[i], edges[i + 1], edges[i + 2]
        fb[i] = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
        fb[i] *= 2.0 / (hi - lo)
    return fb.astype(np.float32)


def mel_frames(wav: np.ndarray) -> np.ndarray:
    """[T, 40] mel power frames, centred windows (reflect padding) as librosa's melspectrogram."""
    pad = np.pad(wav, N_FFT // 2, mode="reflect")
    n = 1 + (len(pad) - N_FFT) // HOP
    win = np.hanning(N_FFT + 1)[:-1].astype(np.float32)
    frames = np.stack([pad[i * HOP:i * HOP + N_FFT] * win for i in range(n)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    return (power @ _slaney_mel(SR, N_FFT, N_MELS).T).astype(np.float32)


def case_resemblyzer(work: Path) -> Case:
    import torch

    from fixtures.datasets import _VAD_TEXT, espeak

    out = work / "resemblyzer_lstm.onnx"
    if not out.is_file():
        state = torch.load(_pkg_file("resemblyzer", "pretrained.pt"), map_location="cpu")["model_state"]

        class SpeakerEncoder(torch.nn.Module):  # resemblyzer.VoiceEncoder's forward
            def __init__(self):
                super().__init__()
                self.lstm = torch.nn.LSTM(N_MELS, 256, 3, batch_first=True)
                self.linear = torch.nn.Linear(256, 256)

            def forward(self, mels):
                _, (hidden, _) = self.lstm(mels)
                e = torch.relu(self.linear(hidden[-1]))
                return e / torch.norm(e, dim=1, keepdim=True)

        net = SpeakerEncoder()
        net.load_state_dict({k: v for k, v in state.items() if k.startswith(("lstm.", "linear."))})
        torch.onnx.export(net.eval(), (torch.zeros(1, FRAMES, N_MELS),), str(out), dynamo=False, opset_version=17,
                          input_names=["mels"], output_names=["embedding"])
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
    files = _disk_files(240, seed=4)
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
    words = sorted({t for t in heads if t.isalpha() and t.isascii() and 2 <= len(t) < G2P_LEN})
    idx = {g: i for i, g in enumerate(GRAPHEMES)}
    tokens = np.zeros((len(words), G2P_LEN), np.int64)
    for r, word in enumerate(words):
        ids = [idx[c] for c in word] + [idx["</s>"]]
        tokens[r, :len(ids)] = ids
    ds = Dataset({"tokens": tokens}, None, f"{len(words)} English words (g2p-en's homograph list)", False,
                 {"tokens": 2})
    calib, ev = ds.split(0.3, seed=1)
    return Case("g2p_gru", "grapheme-to-phoneme GRU, int64 token ids [1,12] -> first phoneme [1,74]", out, calib, ev,
                2.0, {}, "English words from g2p-en's homograph list, padded to 12 tokens; judged against FP32")


CASES = {"resemblyzer_lstm": case_resemblyzer, "magika_bytes": case_magika, "g2p_gru": case_g2p}
