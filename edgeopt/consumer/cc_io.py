"""The input and output part of ``load.cc``: the model's inputs as a table, read from raw files, outputs printed.

A compiled ``load.cc`` runs as ``./load MODEL_DIR [INPUT.bin ...]``: one file per model input, in the manifest's
input order, holding the input's bytes in C order, the ONNX layout and the manifest's dtype (numpy's
``array.tofile``); an input without a file is zeros. It prints one line per output,
``output NAME SHAPE VALUES...`` (the values as decimal text), which :func:`parse_outputs` reads back.
"""

from __future__ import annotations

import json

import numpy as np

# numpy dtype name -> (C++ element type, ONNX Runtime element type, TVM DLDataType code and bits)
DTYPES = {"float32": ("float", "FLOAT", "kDLFloat, 32"), "float64": ("double", "DOUBLE", "kDLFloat, 64"),
          "float16": ("uint16_t", "FLOAT16", "kDLFloat, 16"), "int64": ("int64_t", "INT64", "kDLInt, 64"),
          "int32": ("int32_t", "INT32", "kDLInt, 32"), "int8": ("int8_t", "INT8", "kDLInt, 8"),
          "uint8": ("uint8_t", "UINT8", "kDLUInt, 8"), "bool": ("bool", "BOOL", "kDLBool, 8")}

HELPERS = r"""
struct Input { const char* name; std::vector<int64_t> shape; size_t item_size; };

static size_t element_count(const std::vector<int64_t>& shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
}

// Input i's bytes: the file argv[2 + i] (raw, C order, the input's dtype), or zeros without one.
static std::vector<char> input_bytes(const Input& in, size_t i, int argc, char** argv) {
    const size_t bytes = element_count(in.shape) * in.item_size;
    if (argc <= static_cast<int>(2 + i)) return std::vector<char>(bytes, 0);
    std::ifstream f(argv[2 + i], std::ios::binary);
    std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (data.size() != bytes) {
        std::cerr << "input " << in.name << ": " << argv[2 + i] << " holds " << data.size() << " bytes, expected "
                  << bytes << std::endl;
        std::exit(2);
    }
    return data;
}

template <typename T>
static void print_values(const void* data, size_t count) {
    const T* p = static_cast<const T*>(data);
    for (size_t k = 0; k < count; ++k) std::cout << ' ' << static_cast<double>(p[k]);
}

static void print_output(const std::string& name, const std::vector<int64_t>& shape) {
    std::cout << "output " << name << ' ';
    for (size_t k = 0; k < shape.size(); ++k) std::cout << (k ? "x" : "") << shape[k];
    if (shape.empty()) std::cout << "scalar";
}
"""

INCLUDES = ("#include <cstdint>\n#include <cstdlib>\n#include <fstream>\n#include <iostream>\n#include <iterator>\n"
            "#include <string>\n#include <vector>\n")


def _dims(shape) -> str:
    return ", ".join(str(int(d)) if isinstance(d, int) and d > 0 else "1" for d in shape)


def inputs_table(manifest: dict) -> str:
    """``INPUTS``: each model input's name, shape (a dynamic dimension at 1) and item size, in manifest order."""
    rows = [f"    {{{json.dumps(t['name'])}, {{{_dims(t['shape'])}}}, {np.dtype(t['dtype']).itemsize}}}"
            for t in manifest["inputs"]]
    return "static const std::vector<Input> INPUTS = {\n" + ",\n".join(rows) + "};\n"


def parse_outputs(stdout: str) -> dict[str, np.ndarray]:
    """The outputs a compiled ``load.cc`` printed, by name, as float64 arrays of their printed shapes."""
    out = {}
    for line in stdout.splitlines():
        if not line.startswith("output "):
            continue
        _, name, shape, *values = line.split()
        dims = [] if shape == "scalar" else [int(d) for d in shape.split("x")]
        out[name] = np.asarray([float(v) for v in values], dtype=np.float64).reshape(dims)
    return out


# the C++ main of ``load.cc``: its model directory from argv[1], then the runtime's body (``MAIN % body``)
MAIN = """
int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : ".";
%s
    return 0;
}
"""


def quoted(text) -> str:
    """``text`` as a C++ string literal (JSON's escapes are C++'s)."""
    return json.dumps(str(text))
