#!/usr/bin/env python3
# The template strings `chat_golden --all` runs besides the built-in names, as NAME TEMPLATE
# pairs separated by NUL bytes (for bash's `mapfile -d ''`; the argument --test-chat-template
# before the second group):
#  - "marker: ..." — hand-written strings made of the markers llama.cpp b11312's
#    llm_chat_detect_template (src/llama-chat.cpp) looks for: one per branch (every family, dots1
#    included, which has no built-in name), strings that hold the markers of two families (the
#    first branch in upstream's order wins) and strings upstream recognizes as nothing;
#  - "test-chat-template: NAME" — every `template_str` of the tree's tests/test-chat-template.cpp
#    (b11312, MIT), decoded from its C++ string literal, in the order of the source.
#
# usage: chat_cases.py path/to/tests/test-chat-template.cpp > cases.bin
import re
import sys

# (what it should select, per upstream's branches; the golden records only upstream's output)
MARKERS = [
    ("chatml", "{# <|im_start|> #}"),
    ("phi4", "{# <|im_start|> <|im_sep|> #}"),
    ("smolvlm", "{# <|im_start|> <end_of_utterance> #}"),
    ("chatml before llama3 and mistral", "{# <|im_start|> [INST] <|start_header_id|><|end_header_id|> #}"),
    ("llama2 by the 'mistral' prefix", "mistral"),
    ("llama2 by the 'mistral' prefix, not a name", "mistral-v2"),
    ("nothing: 'mistral' not at the start", "{# mistral #}"),
    ("mistral-v7", "{# [INST] [SYSTEM_PROMPT] #}"),
    ("mistral-v1", "{{ ' [INST] ' + system_message }}"),
    ("mistral-v3-tekken", '{# [AVAILABLE_TOOLS]"[INST]" #}'),
    ("mistral-v3", "{# [AVAILABLE_TOOLS][INST] #}"),
    ("llama2-sys-strip", "{# [INST] content.strip() <<SYS>> bos_token + '[INST] #}"),
    ("llama2-sys-bos", "{# bos_token + '[INST] <<SYS>> #}"),
    ("llama2-sys", "{# [INST] <<SYS>> #}"),
    ("llama2", "{# [INST] #}"),
    ("phi3", "{# <|assistant|> <|end|> #}"),
    ("phi3 before glmedge and solar-open", "{# <|assistant|><|user|><|end|><|begin|><|content|> #}"),
    ("chatglm4", "{# [gMASK]<sop> #}"),
    ("chatglm4 before glmedge", "{# [gMASK]<sop><|assistant|><|user|> #}"),
    ("exaone-moe", "{# <|assistant|><|user|><|tool_declare|></s> #}"),
    ("falcon3", "{# <|assistant|><|user|></s> #}"),
    ("glmedge", "{# <|assistant|><|user|> #}"),
    ("glmedge by its image marker", "{# <|{{ item['role'] }}|> <|begin_of_image|> #}"),
    ("zephyr", "{# <|user|> <|endoftext|> #}"),
    ("monarch", "{{ bos_token + message['role'] }}"),
    ("gemma", "{# <start_of_turn> #}"),
    ("gemma before openchat", "{# <start_of_turn> GPT4 Correct #}"),
    ("orion", "{{ '\\n\\nAssistant: ' + eos_token }}"),
    ("openchat", "{# GPT4 Correct  #}"),
    ("vicuna", "{# USER: ASSISTANT:  #}"),
    ("vicuna-orca", "{# SYSTEM: USER: ASSISTANT:  #}"),
    ("deepseek", "{# ### Instruction: <|EOT|> #}"),
    ("deepseek before llama3", "{# ### Instruction: <|EOT|> <|start_header_id|><|end_header_id|> #}"),
    ("command-r", "{# <|START_OF_TURN_TOKEN|><|USER_TOKEN|> #}"),
    ("llama3", "{# <|start_header_id|> <|end_header_id|> #}"),
    ("llama3 before deepseek3", "{# <|start_header_id|><|end_header_id|> <｜Assistant｜><｜User｜><｜end▁of▁sentence｜> #}"),
    ("chatglm3", "{# [gMASK]sop #}"),
    ("minicpm", "{# <用户> #}"),
    ("deepseek2", "{{ 'Assistant: ' + message['content'] + eos_token }}"),
    ("deepseek3", "{# <｜Assistant｜><｜User｜><｜end▁of▁sentence｜> #}"),
    ("nothing: deepseek3 needs all three markers", "{# <｜Assistant｜><｜User｜> #}"),
    ("exaone3", "{# [|system|][|assistant|][|endofturn|] #}"),
    ("exaone4", "{# [|system|][|assistant|][|endofturn|][|tool|] #}"),
    ("rwkv-world", "{# rwkv-world #}"),
    ("rwkv-world by its user line", "{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"),
    ("granite", "{# <|start_of_role|> #}"),
    ("granite-4.0", "{# <|start_of_role|><tool_call> g4_default_system_message #}"),
    ("granite-4.1", "{# <|start_of_role|><tools> #}"),
    ("gigachat", "{{ message['role'] + additional_special_tokens[0] + message['content'] + additional_special_tokens[1] }}"),
    ("megrez", "{# <|role_start|> #}"),
    ("yandex", "{# Ассистент: #}"),
    ("bailing", "{# <role>ASSISTANT</role> 'HUMAN' #}"),
    ("bailing-think", '{# <role>ASSISTANT</role> "HUMAN" <think> #}'),
    ("bailing2", "{# <role>ASSISTANT</role><role>HUMAN</role><|role_end|> #}"),
    ("llama4", "{# <|header_start|> <|header_end|> #}"),
    ("llama4 before dots1", "{# <|header_start|><|header_end|><|endofuserprompt|> #}"),
    ("dots1", "{# <|endofuserprompt|> #}"),
    ("hunyuan-moe", "{# <|extra_0|> <|extra_4|> #}"),
    ("gpt-oss", "{# <|start|> <|channel|> #}"),
    ("gpt-oss before seed_oss", "{# <seed:bos><|start|><|channel|> #}"),
    ("hunyuan-vl", "{# <｜hy_Assistant｜><｜hy_begin▁of▁sentence｜><｜hy_place▁holder▁no▁3｜> #}"),
    ("hunyuan-dense", "{# <｜hy_Assistant｜><｜hy_place▁holder▁no▁3｜> #}"),
    ("kimi-k2", "{# <|im_assistant|>assistant<|im_middle|> #}"),
    ("seed_oss", "{# <seed:bos> #}"),
    ("grok-2", "{{ 'Assistant: '  + message['content'] + '<|separator|>' }}"),
    ("pangu-embedded", "{# [unused9]系统：[unused10] #}"),
    ("solar-open", "{# <|begin|><|end|><|content|> #}"),
    ("nothing: empty", ""),
    ("nothing: test-chat-template's invalid template", "INVALID TEMPLATE"),
    ("nothing: a name in capitals", "ChatML"),
    ("nothing: a name with a trailing space", "chatml "),
]

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def decode(literal):
    """The value of a C++ string literal's body (the escapes test-chat-template.cpp uses)."""
    def one(m):
        if m.group(1) not in ESCAPES:
            sys.exit(f"chat_cases.py: unknown escape \\{m.group(1)}")
        return ESCAPES[m.group(1)]
    return re.sub(r"\\(.)", one, literal)


def test_chat_template_cases(path):
    src = open(path, encoding="utf-8").read()
    src = src[src.index("int main_automated_tests(void) {"):]
    src = re.sub(r"^\s*//[^\n]*$", "", src, flags=re.M)  # the commented-out 'wrong' template
    lit = r'"((?:[^"\\\n]|\\.)*)"'
    names = re.findall(r"/\* \.name= \*/ " + lit, src)
    templates = re.findall(r"/\* \.template_str=? \*/ (?:U8C\()?" + lit, src)
    if len(names) != len(templates) or not names:
        sys.exit(f"chat_cases.py: {len(names)} names but {len(templates)} templates in {path}")
    return [("test-chat-template: " + decode(n), decode(t)) for n, t in zip(names, templates)]


out = sys.stdout.buffer
for name, tmpl in [("marker: " + n, t) for n, t in MARKERS]:
    out.write(name.encode() + b"\0" + tmpl.encode() + b"\0")
out.write(b"--test-chat-template\0")  # (chat_golden runs that test's conversation for these too)
for name, tmpl in test_chat_template_cases(sys.argv[1]):
    out.write(name.encode() + b"\0" + tmpl.encode() + b"\0")
