#!/usr/bin/env python3
# Writes src/quant/iq_tables.rs from upstream's ggml-common.h (MIT; llama.cpp b11312 as vendored
# by llama-cpp-python 0.3.36). Run from the repository root:
#   python3 tests/data/quants/gen_tables.py /work/ref/llama_cpp_python-0.3.36/vendor/llama.cpp/ggml/src/ggml-common.h
import re, sys
src = sys.argv[1]
lines = open(src).read().split('\n')
want = {'ksigns_iq2xs': ('u8', 'KSIGNS_IQ2XS'), 'iq2xxs_grid': ('u64', 'IQ2XXS_GRID'), 'iq2xs_grid': ('u64', 'IQ2XS_GRID'),
        'iq2s_grid': ('u64', 'IQ2S_GRID'), 'iq3xxs_grid': ('u32', 'IQ3XXS_GRID'), 'iq3s_grid': ('u32', 'IQ3S_GRID'),
        'kvalues_iq4nl': ('i8', 'KVALUES_IQ4NL'), 'kvalues_fp4': ('i8', 'KVALUES_FP4'), 'iq1s_grid': ('u64', 'IQ1S_GRID')}
out = ['//! The grids and codebooks of the IQ and FP4 formats, taken verbatim from llama.cpp',
       "//! b11312's `ggml/src/ggml-common.h` (MIT licence, Copyright (c) 2023-2024 The ggml authors);",
       '//! each table names the line of its `GGML_TABLE_BEGIN`. Data only: written by',
       '//! `tests/data/quants/gen_tables.py` from that file, not edited by hand.', '']
i = 0
while i < len(lines):
    m = re.match(r'GGML_TABLE_BEGIN\((\w+), (\w+), (\w+)\)', lines[i])
    if m and m.group(2) in want:
        ty, name = want[m.group(2)]
        vals, j = [], i + 1
        while not lines[j].startswith('GGML_TABLE_END'):
            vals += [v.strip() for v in lines[j].split(',') if v.strip()]
            j += 1
        out += [f'/// `{m.group(2)}` (ggml-common.h:{i+1}).', '#[rustfmt::skip]',
                f'pub(crate) static {name}: [{ty}; {len(vals)}] = [']
        per = 4 if ty == 'u64' else (8 if ty == 'u32' else 16)
        for k in range(0, len(vals), per):
            out.append('    ' + ', '.join(vals[k:k + per]) + ',')
        out += ['];', '']
        i = j
    i += 1
open('src/quant/iq_tables.rs', 'w').write('\n'.join(out))
