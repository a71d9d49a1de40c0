#!/usr/bin/env python3
# Data for the differential test tokenizer::pretok::differential (src/tokenizer/pretok.rs,
# #[ignore]): random texts and llama.cpp b11312's pre-tokenizer split of each under the ten
# pre-tokenizers the test knows, as upstream's own unicode_regex_split computes them.
#
#   pretok_fuzz.py LLAMA_SRC PRETOK_SPLIT OUT_DIR [N [SEED]]
#
# LLAMA_SRC: the llama.cpp tree (its src/llama-vocab.cpp gives each pre-tokenizer's regexes, read
# here, never copied); PRETOK_SPLIT: pretok_split.cpp built against its libllama (the script
# scripts/regenerate-references.sh's `pretok` stage builds it). Writes OUT_DIR/fuzz.txt (per text
# its byte length, a newline, the bytes, a newline), OUT_DIR/sets.txt (the regexes) and
# OUT_DIR/fuzz.out (per text and pre-tokenizer "NAME len len ...", the words' lengths in bytes).
# Then: DEEPSEEK_PRETOK_FUZZ_DIR=OUT_DIR cargo test --lib pretok_matches_upstream -- --ignored
import os
import random
import re
import subprocess
import sys

src, split_exe, out = sys.argv[1], sys.argv[2], sys.argv[3]
n_texts = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
random.seed(int(sys.argv[5]) if len(sys.argv) > 5 else 1)

# the test's names, in its order, and the switch case of llm_tokenizer_bpe that holds each
SETS = [("default", None), ("llama3", "LLAMA3"), ("deepseek-llm", "DEEPSEEK_LLM"), ("deepseek-coder", "DEEPSEEK_CODER"),
        ("deepseek-v3", "DEEPSEEK3_LLM"), ("falcon", "FALCON"), ("starcoder", "STARCODER"), ("gpt2", "GPT2"),
        ("qwen2", "QWEN2"), ("qwen35", "QWEN35")]

vocab = open(os.path.join(src, "src/llama-vocab.cpp"), encoding="utf-8").read()
body = vocab[vocab.index("struct llm_tokenizer_bpe : llm_tokenizer {"):]
body = body[:body.index("std::vector<std::string> regex_exprs;")]
ESC = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def literals(block):
    """The regexes of one `regex_exprs = { ... };` block: C++ string literals (comments dropped)."""
    block = re.sub(r"//[^\n]*", "", block)
    exprs = []
    for m in re.finditer(r'"((?:\\.|[^"\\])*)"', block):
        s, i, v = m.group(1), 0, []
        while i < len(s):
            if s[i] == "\\":
                v.append(ESC[s[i + 1]])
                i += 2
            else:
                v.append(s[i])
                i += 1
        exprs.append("".join(v))
    return exprs


def regexes(case):
    if case is None:
        at = body.index("default:")
    else:
        at = re.search(r"case LLAMA_VOCAB_PRE_TYPE_%s:" % case, body).start()
    start = body.index("regex_exprs = {", at)
    return literals(body[start:body.index("};", start)])


# texts: runs from classes of characters a pre-tokenizer tells apart
POOLS = [
    "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  ", "\n", "\r\n", "\t",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL",
    "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßÀÉÎÕÜ", "αβγδεζηθικλμνξοπρστυφχψω", "абвгдежзийклмнопрстуфхцчшщъыьэюя",
    "深度求索的模型在中央处理器上运行内存泄漏与线程竞争必须被修复", "ひらがなカタカナ", "한국어텍스트", "مرحبا", "٠١٢٣٤٥٦٧٨٩",
    "①②③½¼²³", "　", "\u00a0", "\u2003", "…—–‘’“”«»", "😀🚀👍🏽", "\u0301\u0308", "，。！？：；（）【】", "ＡＢＣａｂｃ１２３",
    "µƺǄʓͰΆЀ", "$+<=>^~|",
]


def text():
    parts = []
    for _ in range(random.randint(1, 40)):
        pool = random.choice(POOLS)
        if len(pool) <= 3 or random.random() < 0.3:
            parts.append(pool * random.randint(1, 3))
        else:
            parts.append("".join(random.choice(pool) for _ in range(random.randint(1, 8))))
    return "".join(parts)


os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "sets.txt"), "wb") as f:
    for name, case in SETS:
        exprs = regexes(case)
        f.write(b"%s\n%d\n" % (name.encode(), len(exprs)))
        for e in exprs:
            b = e.encode("utf-8")
            f.write(b"%d\n%s\n" % (len(b), b))
with open(os.path.join(out, "fuzz.txt"), "wb") as f:
    for _ in range(n_texts):
        b = text().encode("utf-8")
        f.write(b"%d\n%s\n" % (len(b), b))
with open(os.path.join(out, "fuzz.out"), "wb") as f:
    subprocess.run([split_exe, os.path.join(out, "sets.txt"), os.path.join(out, "fuzz.txt")], stdout=f, check=True)
print("%s: %d texts x %d pre-tokenizers" % (out, n_texts, len(SETS)))
