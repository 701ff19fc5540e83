"""Hugging Face `tokenizers` (Rust) on the seed texts, printed like
encoder_bare --mode tokenize: the peer of bench/tokenizer/run.sh.

  hf_tokenize.py MODEL_DIR N REPEAT
Tokenizes N copies of the seed sentence with the model's tokenizer.json
(no padding, truncation at the model's 256 tokens, special tokens added, as
sentence-transformers does) with encode_batch; TOKENIZERS_PARALLELISM decides
whether it uses every core.
"""
import os
import sys
import time

from tokenizers import Tokenizer

SENTENCE = "Using a GPU allows you to significantly speed up encoding."

model_dir, n, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
tokenizer.no_padding()
tokenizer.enable_truncation(256)
texts = [SENTENCE] * n
for _ in range(repeat):
    start = time.perf_counter()
    encodings = tokenizer.encode_batch(texts)
    seconds = time.perf_counter() - start
    tokens = sum(len(e.ids) for e in encodings)
    print(f"docs_per_s={n / seconds:.1f} n={n} seconds={seconds:.4f} tokens={tokens} "
          f"mode=hf_tokenizers parallel={os.environ.get('TOKENIZERS_PARALLELISM', 'default')}")
