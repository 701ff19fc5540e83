#!/usr/bin/env python3
"""Writes the parity expectations for SentenceEncoder (run in the venv made
by scripts/parity_setup.sh; Gantry itself never runs Python).

For a deterministic corpus of varied strings it records the token ids of
sentence-transformers' tokenize() (the fast HF tokenizer, max_seq_length 256),
every token of the fast tokenizer uncut with its byte offsets and whether the
template added it (special_tokens_mask), and the embeddings of SentenceTransformer.encode() on CPU in float32.

  parity_expectations.py MODEL_DIR OUT.json
"""
import json
import random
import sys


def corpus():
    fixed = [
        "This is an example sentence",
        "Each sentence is converted.",
        "",
        "Café déjà vu — 東京",
        "Hello, world! I'm 123abc.",
        "hi😀 there",
        "naïve café",
        "ΟΔΟΣ",
        "ΟΔΥΣΣΕΥΣ ΚΑΙ ΠΗΝΕΛΟΠΗ",
        "Σίσυφος ΣΊΣΥΦΟΣ σίσυφος",
        "unaffable",
        "Using a GPU allows you to significantly speed up encoding.",
        "a [SEP] b",
        "[CLS] starts here [SEP] and [PAD] [UNK] [MASK] end",
        "[sep] lowercase is not special, nor is [ SEP ]",
        "x[SEP]y[MASK]z",
        "zero\u200bwidth\u200cjoiner\u200dand\ufeffbom",
        "control\x01\x02\x7f chars\x1b[0m and \x00 null",
        "tabs\tand\nnewlines\r\nand\u00a0nbsp\u3000ideographic\u2028line\u2029para",
        "soft\u00adhyphen and \u2060word joiner",
        "replacement \ufffd char",
        "private use \ue000\uf8ff chars",
        "unassigned \u0378 code point",
        "İstanbul ıi İI",
        "straße STRASSE Straße",
        "ﬁnancial ﬂow (ligatures)",
        "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３",
        "中文句子测试，包括标点。",
        "日本語のテキスト、カタカナとひらがな。",
        "한국어 문장입니다. 안녕하세요!",
        "Tiếng Việt có dấu: Đường phố Hà Nội",
        "Ελληνικά: Αθήνα, Θεσσαλονίκη.",
        "Русский текст: Привет, мир! Ёлка.",
        "العربية: مرحبا بالعالم",
        "עברית: שלום עולם",
        "हिन्दी: नमस्ते दुनिया",
        "ไทย: สวัสดีชาวโลก",
        "Emoji 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ ☕",
        "Math ∑ x² ≤ ∞ ± √2 ≠ π",
        "Currency $100 €50 £20 ¥1000 ₹500",
        "Symbols: @#$%^&*()_+-=[]{}|;':\",./<>?`~",
        "Quotes “curly” ‘single’ «guillemets» „low“",
        "Dashes – — ‒ ― and ellipsis…",
        "email: someone@example.com url: https://example.org/path?q=1&x=2#frag",
        "C++ code: std::vector<int> v{1,2,3}; for (auto& x : v) x *= 2;",
        "numbers 3.14159 1,000,000 2024-01-01 12:30pm 1st 2nd 3rd 4th",
        "abc123def456 a1b2c3 H2O CO2 COVID19 mp3 4K",
        "e\u0301 combining acute, a\u0308 umlaut, n\u0303",
        "Z\u0351\u0346a\u035bl\u0350g\u0313o text",
        "   leading and trailing spaces   ",
        "\n\n\n",
        "!!!???...",
        "supercalifragilisticexpialidocious antidisestablishmentarianism",
        "a" * 100,
        "b" * 101,
        "x" * 150 + " short words after a long one",
        "é" * 101,
        "word " * 300,
        "The quick brown fox jumps over the lazy dog. " * 40,
        "東京" * 200,
        "𠀀𠀁 CJK extension B 𪜀 and 𫝀 𬺰",
        "\U0002B820\U0002B8FF range between fast and slow tokenizers",
        "Mixed CASE WoRdS and camelCaseIdentifiers snake_case_names",
        "I can't won't shouldn't y'all",
    ]
    rng = random.Random(20240527)
    words = ("the of and to in is was for on that with as by at from this be are not or "
             "encoder sentence model vector search neural network GPU CPU speed Jina gRPC "
             "café naïve résumé über Zürich Ångström façade coöperate "
             "東京 北京 日本 中国 学生 한국 서울 Αθήνα Москва القاهرة").split()
    chars = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") +
             list(".,;:!?'\"()[]{}-_/\\@#$%^&*+=<>|~`") +
             list("àáâãäåçèéêëìíîïñòóôõöùúûüýÿßøæœÀÉÎÕÜ") +
             list("αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΣΩ") +
             list("абвгдежзийклмнопрстуфхцчшщъыьэюя") +
             list("中国人大学生東京日本語한국어") + list("😀👍🎉🚀") +
             ["\u200b", "\u00a0", "\t", "\n", "\u0301", "\u0308", "\u2014", "\u2019", "\u00ad"])
    generated = []
    for _ in range(150):
        n = rng.randint(1, 30)
        generated.append(" ".join(rng.choice(words) for _ in range(n)))
    for _ in range(100):
        n = rng.randint(1, 80)
        generated.append("".join(rng.choice(chars + [" "] * 8) for _ in range(n)))
    for _ in range(20):
        n = rng.randint(200, 400)
        generated.append(" ".join(rng.choice(words) for _ in range(n)))
    for _ in range(10):
        generated.append(rng.choice(words) + "".join(rng.choice(chars) for _ in range(120)))
    return fixed + generated


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_dir, out_path = sys.argv[1], sys.argv[2]
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    # float32 whatever the file holds (recent transformers keep a float16
    # file in float16): the C++ side widens the weights to float32 too.
    model = SentenceTransformer(model_dir, device="cpu").float()
    assert model.max_seq_length == 256, model.max_seq_length
    texts = corpus()
    ids = [model.tokenize([t])["input_ids"][0].tolist() for t in texts]
    emb = model.encode(texts, batch_size=32, convert_to_numpy=True)
    fast = model.tokenizer.backend_tokenizer
    fast.no_truncation()
    fast.no_padding()
    spans = []
    for text in texts:
        encoding = fast.encode(text, add_special_tokens=True)
        # Python gives char offsets; Gantry (as TEI) gives UTF-8 byte offsets.
        to_bytes = [0]
        for ch in text:
            to_bytes.append(to_bytes[-1] + len(ch.encode("utf-8")))
        spans.append([[token_id, to_bytes[start], to_bytes[stop], special]
                      for token_id, (start, stop), special in
                      zip(encoding.ids, encoding.offsets, encoding.special_tokens_mask)])
    cases = [{"text": t, "ids": i, "embedding": [float(x) for x in e], "tokens": s}
             for t, i, e, s in zip(texts, ids, emb, spans)]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"model_dir": model_dir, "max_seq_length": model.max_seq_length,
                   "cases": cases}, f, ensure_ascii=False)
    print(f"parity_expectations: wrote {len(cases)} cases to {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
