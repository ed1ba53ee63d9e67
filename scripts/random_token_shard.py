#!/usr/bin/env python3
"""Writes a shard of random GPT-2 token ids in llm.c's format, for benchmarks and checks whose speed
or memory does not depend on the text: a header of 256 int32 (magic 20240520, version 1, the token
count, then zeros) and the ids as uint16, drawn with Python's random.randrange(50257) from SEED.

    python3 scripts/random_token_shard.py OUT COUNT SEED
"""
import random
import struct
import sys


def main():
    usage = "usage: random_token_shard.py OUT COUNT SEED (COUNT a whole number of tokens >= 1, SEED a whole number)"
    if len(sys.argv) != 4:
        sys.exit(usage)
    try:
        out, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    except ValueError as error:
        sys.exit("random_token_shard.py: %s; %s" % (error, usage))
    if count < 1:
        sys.exit("random_token_shard.py: COUNT %d; %s" % (count, usage))
    random.seed(seed)
    with open(out, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
        f.write(struct.pack("<%dH" % count, *(random.randrange(50257) for _ in range(count))))


if __name__ == "__main__":
    try:
        main()
    except OSError as error:
        sys.exit("random_token_shard.py: %s" % error)
