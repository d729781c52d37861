#!/usr/bin/env python3
"""Renders the chat-template fixtures with Python's jinja2, the engine Hugging Face renders
chat templates with, set up as transformers sets it up (a sandboxed environment with
trim_blocks, lstrip_blocks and loop controls; raise_exception and strftime_now as globals;
messages, add_generation_prompt, tools=None and the special tokens as variables). trine's
renderer (tokenizer/src/chat.rs) must produce the same bytes.

    python3 -m venv /tmp/jinja && /tmp/jinja/bin/pip install jinja2
    /tmp/jinja/bin/python scripts/reference/chat_templates.py

Templates (tokenizer/tests/fixtures/chat/*.jinja): smollm2 is `tokenizer.chat_template` of
SmolLM2-135M-Instruct's GGUF; llama-3.1, llama-3.2, qwen-2.5, phi-3.5, mistral-nemo and
deepseek-r1-distill-qwen are llama.cpp's models/templates copies of the Hugging Face models'
templates; gemma-3 is google/gemma-3-*-it's and qwen-3 Qwen3's (its `.startswith()`,
`.split()`, `.strip()` calls exercise the Python methods). strftime_now formats a fixed instant (FIXED_NOW) so the fixture does not
depend on the day it was made; the test gives trine's renderer the same instant.
"""

import datetime
import json
import pathlib

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tokenizer" / "tests" / "fixtures" / "chat"

# Unix seconds of 2024-03-05 07:08:09 UTC.
FIXED_NOW = 1709622489

# The special tokens each model's tokenizer config names.
TOKENS = {
    "smollm2": ("<|im_start|>", "<|im_end|>"),
    "llama-3.1": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama-3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen-2.5": ("<|endoftext|>", "<|im_end|>"),
    "gemma-3": ("<bos>", "<eos>"),
    "phi-3.5": ("<s>", "<|endoftext|>"),
    "mistral-nemo": ("<s>", "</s>"),
    "qwen-3": ("", "<|im_end|>"),
    "deepseek-r1-distill-qwen": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
}

CONVERSATIONS = {
    "one_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "  Answer in French.\n"},
        {"role": "user", "content": " Bonjour ?  "},
        {"role": "assistant", "content": "Bonjour !\n"},
        {"role": "user", "content": "Comment ça va — très bien ? 日本"},
    ],
    "no_system_two_turns": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another, with <|im_end|> in it."},
    ],
    "reasoning_then_question": [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "<think>\nPick one.\n</think>\n\nBlue."},
        {"role": "user", "content": "Why?"},
    ],
    "ends_with_reasoning_reply": [
        {"role": "system", "content": "Think first."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nGreet back.\n\n</think>\n\nHello!\n"},
    ],
    "roles_out_of_turn": [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"},
    ],
}


def raise_exception(message):
    raise TemplateError(message)


def strftime_now(fmt):
    return datetime.datetime.fromtimestamp(FIXED_NOW, datetime.timezone.utc).strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    env = environment()
    cases = []
    for name, (bos, eos) in TOKENS.items():
        source = (FIXTURES / f"{name}.jinja").read_text(encoding="utf-8")
        template = env.from_string(source)
        for conv, messages in CONVERSATIONS.items():
            for add in (False, True):
                case = {"template": name, "conversation": conv, "add_generation_prompt": add}
                try:
                    case["rendered"] = template.render(
                        messages=messages,
                        add_generation_prompt=add,
                        tools=None,
                        bos_token=bos,
                        eos_token=eos,
                    )
                except TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    out = {
        "note": "written by scripts/reference/chat_templates.py (jinja2); do not edit",
        "now": FIXED_NOW,
        "tokens": {k: {"bos": b, "eos": e} for k, (b, e) in TOKENS.items()},
        "conversations": CONVERSATIONS,
        "cases": cases,
    }
    text = json.dumps(out, ensure_ascii=False, indent=1) + "\n"
    (FIXTURES / "rendered.json").write_text(text, encoding="utf-8")
    print(f"{len(cases)} cases, {sum('error' in c for c in cases)} raising")


if __name__ == "__main__":
    main()
