#!/usr/bin/env python3
"""Writes the GPT-2 tokenizer fixtures that tests/test_tokenizer.cpp checks adacc against.

The reference is OpenAI's tiktoken, built from the very encoder.json + vocab.bpe files the C++
tokenizer loads (not tiktoken's download cache), with GPT-2's original pre-tokenization regex.
tiktoken is needed only to regenerate the fixtures; neither the C++ code nor the tests use it.

Outputs (both small, committed):
  tests/fixtures/tokenizer_cases.jsonl       one {"text", "allow_special", "ids"} per line
  tests/fixtures/tokenizer_shared_files.json per shared text file tokenized whole: bytes,
                                             token count and sha256 of the ids (uint32 LE)

Usage: dev/make_tokenizer_fixture.py [--shared ../shared/data]
"""
import argparse
import hashlib
import json
import random
import struct
import sys
import unicodedata
from pathlib import Path

import tiktoken
import tiktoken.load

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
END_OF_TEXT = "<|endoftext|>"
SEED = 20240520

HANDWRITTEN_CASES = [
    "", "hello world", " signs", "Question: Which?\nAnswer:", "Hello, World!", "hello  world",
    # contractions, including the uppercase ones GPT-2's regex does not catch
    "I'm", "you're", "they've", "she'll", "he'd", "it's", "don't", "can't", "won't", "y'all",
    "IT'S", "He'S", "I'M", "YOU'RE", "THEY'VE", "SHE'LL", "HE'D", "DON'T", "'s", "'t", "'re",
    "'ve", "'m", "'ll", "'d", "'", "''", "'''s", "rock'n'roll", "the dog's bone's", "'tis", "o'clock",
    "’s curly apostrophe’s", "l'été", "'S", "'sS", "x'sy",
    # whitespace: runs, tabs, newlines, carriage returns, and where they meet words
    " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", "\n\n\n", " \n", "\n ", " \n ", "\t\t\t",
    "a b", "a  b", "a   b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a \n b", "a\t \nb", "a\r\nb",
    "trailing space ", "trailing spaces   ", "  leading", "\tleading tab", "line\n", "x \t\n \ty",
    "    def f(x):\n        return x\n", "col1\tcol2\tcol3\n1\t2\t3\n", "a \u00a0b", "\u00a0\u00a0x",
    "a\u3000b", "a\u2028b\u2029c", "a\u0085b", "a\u180eb", "\u180e\u180e!", "a\u200bb", "a\u2009b",
    "a\x0bb\x0cc", "\x1c\x1d\x1e\x1f", "a\u202fb\u205fc\u1680d",
    # U+180E is whitespace to PCRE2's \s but not to Unicode White_Space (tiktoken's \s)
    " \u180ex", " \u180e!", "  \u180e1", "a \u180e\u180e b",
    # digits and numbers
    "0", "1234567890", "3.14159", "1,000,000", "$100", "-42", "1e-10", "0x7fff", "2024-05-20",
    "x²+y³", "½ ¼ ¾", "١٢٣ ٤٥٦", "٣.١٤", "一二三", "Ⅻ ⅻ", "①②③", " 123 456",
    # accents, combining marks, scripts
    "café", "cafe\u0301", "naïve résumé", "Ångström", "e\u0301\u0302\u0303", "\u0301", "a\u0308\u0308",
    "Привет, мир!", "Γειά σου Κόσμε", "שלום עולם", "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "你好，世界！", "日本語のテキスト", "한국어 텍스트", "ᚠᚢᚦᚨᚱᚲ", "Ꭳ Ꮃ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝟘𝟙𝟚",
    # emoji, including multi-code-point sequences
    "🙂", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪", "❤️", "a🙂b", " 🙂 🙂", "🎉🎉🎉", "#️⃣", "😀😃😄😁",
    # punctuation and symbols
    "...", "?!", "--", "—", "–-", "<html><body>x</body></html>", "{\"key\": [1, 2]}", "a+b=c",
    "@user #tag", "http://example.com/path?q=1&x=2", "C:\\Windows\\path", "~!@#$%^&*()_+",
    "«guillemets»", "„quotes“", "“smart quotes”", "…", "&amp; &lt;", "\u00ad",
    # the special token, as text and allowed, and near misses
    END_OF_TEXT, "a" + END_OF_TEXT + "b", END_OF_TEXT + END_OF_TEXT, " " + END_OF_TEXT + " x",
    "<|endoftext|", "<|endoftext|>>", "<|startoftext|>", "text\n" + END_OF_TEXT + "\nmore",
    # long runs
    " " * 100, "\n" * 50, "a" * 300, "ab" * 150, "!" * 64, "9" * 100, "é" * 50, "\t \n" * 20,
]


def build_encoding(vocab_dir: Path) -> tiktoken.Encoding:
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        str(vocab_dir / "vocab.bpe"), str(vocab_dir / "encoder.json"))
    return tiktoken.Encoding("gpt2_fixture", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={END_OF_TEXT: 50256})


def random_assigned_char(rng: random.Random) -> str:
    """A random code point the fixture's Unicode version (Python's unicodedata) knows.

    Unassigned code points are avoided: tiktoken's regex engine and PCRE2 may know different
    Unicode versions, and a character one of them does not know has no letter/number class.
    """
    ranges = [(0x20, 0x7F), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x52F), (0x590, 0x6FF),
              (0x900, 0xDFF), (0x1E00, 0x1FFF), (0x2000, 0x2BFF), (0x3000, 0x30FF),
              (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF),
              (0x10000, 0x1FFFF)]
    while True:
        low, high = rng.choice(ranges)
        char = chr(rng.randint(low, high - 1))
        if unicodedata.category(char) not in ("Cn", "Cs", "Co"):
            return char


def random_unicode_cases(rng: random.Random, count: int) -> list[str]:
    separators = [" ", "  ", "\n", "\t", "'s", "'S", " '", "1", ""]
    cases = []
    for _ in range(count):
        parts = [random_assigned_char(rng) for _ in range(rng.randint(1, 24))]
        for _ in range(rng.randint(0, 4)):
            parts.insert(rng.randint(0, len(parts)), rng.choice(separators))
        cases.append("".join(parts))
    return cases


def random_ascii_cases(rng: random.Random, count: int) -> list[str]:
    # Weighted towards the characters the regex treats specially.
    alphabet = [chr(c) for c in range(32, 127)] + [" "] * 20 + ["\n", "\t", "\r", "'"] * 5 + ["\x00", "\x07"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(count)]


def shared_text_cases(rng: random.Random, shared: Path, lines_per_file: int) -> list[str]:
    """Whole lines and multi-line paragraphs sampled from the shared corpora."""
    sources = [shared / "tinyshakespeare/input.txt", shared / "lambada_openai/lambada_test.jsonl",
               shared / "arc_easy/ARC-Easy-Dev.jsonl", shared / "EVAL_PROTOCOLS.md"]
    sources += sorted((shared / "enwiki_sample/text/AA").glob("wiki_*"))[:8]
    cases = []
    for source in sources:
        lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
        for _ in range(lines_per_file):
            start = rng.randrange(len(lines))
            span = rng.choice([1, 1, 2, 3, 4])
            cases.append("".join(lines[start:start + span])[:600])
    # The JSONL records decoded, as an eval reader sees them.
    for name in ["lambada_openai/lambada_test.jsonl", "arc_easy/ARC-Easy-Test.jsonl"]:
        records = (shared / name).read_text(encoding="utf-8").splitlines()
        for line in rng.sample(records, 30):
            record = json.loads(line)
            cases.append(record["text"] if "text" in record else record["question"]["stem"])
    return cases


def write_cases(encoding: tiktoken.Encoding, cases: list[str], out: Path) -> None:
    with out.open("w", encoding="utf-8") as stream:
        for text in cases:
            for allow_special in ([False, True] if END_OF_TEXT in text else [False]):
                ids = encoding.encode(text, allowed_special="all") if allow_special \
                    else encoding.encode_ordinary(text)
                record = {"text": text, "allow_special": allow_special, "ids": ids}
                stream.write(json.dumps(record, separators=(",", ":")) + "\n")


def shared_text_files(shared: Path) -> list[Path]:
    files = [shared / "tinyshakespeare/input.txt", shared / "EVAL_PROTOCOLS.md", shared / "README.md"]
    files += sorted((shared / "lambada_openai").glob("*.jsonl"))
    files += sorted((shared / "arc_easy").glob("*.jsonl"))
    files += sorted((shared / "enwiki_sample/text/AA").glob("wiki_*"))
    return files


def write_file_digests(encoding: tiktoken.Encoding, shared: Path, out: Path) -> None:
    records = []
    for path in shared_text_files(shared):
        data = path.read_bytes()
        ids = encoding.encode_ordinary(data.decode("utf-8"))
        digest = hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest()
        records.append({"path": str(path.relative_to(shared)), "bytes": len(data),
                        "tokens": len(ids), "sha256": digest})
    out.write_text(json.dumps({"files": records}, indent=1) + "\n", encoding="utf-8")


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=repo.parent / "shared" / "data")
    args = parser.parse_args()

    encoding = build_encoding(args.shared / "gpt2_tokenizer")
    rng = random.Random(SEED)
    cases = HANDWRITTEN_CASES + random_unicode_cases(rng, 400) + random_ascii_cases(rng, 250)
    cases += shared_text_cases(rng, args.shared, 40)

    fixtures = repo / "tests" / "fixtures"
    write_cases(encoding, cases, fixtures / "tokenizer_cases.jsonl")
    write_file_digests(encoding, args.shared, fixtures / "tokenizer_shared_files.json")
    print(f"wrote {len(cases)} cases and {len(shared_text_files(args.shared))} file digests to {fixtures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
