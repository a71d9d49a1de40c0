#!/usr/bin/env python3
"""Differential test of the pre-tokenizers against llama.cpp's own unicode_regex_split.

    python3 pretok_fuzz.py LLAMA_CPP_SRC OUTDIR     # writes OUTDIR/sets.inc and OUTDIR/fuzz.txt
    g++ -O2 -std=c++17 -I$LLAMA_CPP_SRC -IOUTDIR -o OUTDIR/fuzz pretok_fuzz.cpp \
        $LLAMA_CPP_SRC/unicode.cpp $LLAMA_CPP_SRC/unicode-data.cpp
    OUTDIR/fuzz OUTDIR/fuzz.txt OUTDIR/fuzz.out
    DEEPSEEK_PRETOK_FUZZ_DIR=OUTDIR cargo test --release --lib pretok_matches_upstream -- --ignored

LLAMA_CPP_SRC is llama.cpp's src/ (b11312). The texts mix every character class the regexes
distinguish, contractions, non-ASCII whitespace and invalid UTF-8.
"""
import os
import random
import re
import sys

src_dir, out_dir = sys.argv[1], sys.argv[2]
src = open(os.path.join(src_dir, "llama-vocab.cpp"), encoding="utf-8").read()


def regexes(marker):
    i = src.index(marker)
    body = re.sub(r"//[^\n]*", "", src[i:src.index("break;", i)])
    return re.findall(r'"((?:[^"\\]|\\.)*)"', body)


sets = [("default", "// default regex for BPE tokenization pre-processing")] + [
    (name, "case LLAMA_VOCAB_PRE_TYPE_%s:" % case)
    for name, case in [("llama3", "LLAMA3"), ("deepseek-llm", "DEEPSEEK_LLM"), ("deepseek-coder", "DEEPSEEK_CODER"),
                       ("deepseek-v3", "DEEPSEEK3_LLM"), ("falcon", "FALCON"), ("starcoder", "STARCODER"),
                       ("gpt2", "GPT2"), ("qwen2", "STABLELM2"), ("qwen35", "QWEN35")]
]
with open(os.path.join(out_dir, "sets.inc"), "w", encoding="utf-8") as f:
    for name, marker in sets:
        f.write('    {"%s", {%s}},\n' % (name, ", ".join('"%s"' % r for r in regexes(marker))))

random.seed(int(os.environ.get("SEED", "7")))
pools = [
    "abcXYZ", "éüñßÆ", "αβγΩ", "кириллица", "中文字漢", "ひらがなカタカナ", "한국어", "0123456789", "٣٤٥", "½²⅔",
    " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\u0085", "\u000b\u000c",
    "'s", "'t", "'re", "'VE", "'LL", "'d", "'M", "'", "!?.,;:", "()[]{}", "$+<=>^`|~", "#@%&*/\\-_\"",
    "！，。、", "“”‘’", "…—", "😀🦙", "👨‍👩", "\u0301\u0308", "e\u0301", "\u200d", "\u0000\u0001\u001f", "\u007f",
    "\ufeff", "ｆｕｌｌ", "Ｚ", "ǅ", "µ", "𐐀", "\U0001e900", "ࠀ", "ꙁ", "Ⅻ", "\u2028",
]
with open(os.path.join(out_dir, "fuzz.txt"), "wb") as f:
    for _ in range(int(os.environ.get("N", "3000"))):
        b = "".join(random.choice(pools) for _ in range(random.randint(1, 30))).encode("utf-8")
        if random.random() < 0.1:
            bl = bytearray(b)
            for _ in range(random.randint(1, 3)):
                bl.insert(random.randint(0, len(bl)), random.choice([0x80, 0xC3, 0xE4, 0xF0, 0xFF, 0xED]))
            b = bytes(bl)
        f.write(str(len(b)).encode() + b"\n" + b + b"\n")
