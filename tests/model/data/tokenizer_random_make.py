#!/usr/bin/python3
# Makes tokenizer_reference_random.json: 300 random strings (seed 1) drawn from ASCII,
# contraction letters, whitespace kinds, combining marks and all assigned code points
# of Python's Unicode database, with the ids of the npm package's own JavaScript
# tokenizer (scripts/tokenize_reference.js) and whether the string is already NFC.
# Run from the repository root: /usr/bin/python3 tests/model/data/tokenizer_random_make.py
import json, random, subprocess, tempfile, unicodedata

random.seed(1)
cps = [c for c in range(0x110000)
       if not (0xD800 <= c <= 0xDFFF) and unicodedata.category(chr(c)) not in ("Cn", "Co")]
ascii_ = [chr(c) for c in range(32, 127)] + ["\n", "\t", "\r", " ", " ", " "]
common = list("'sStTmMdDlLrReEvV \n\t.,!?-0123456789") + [
    "\u00a0", "\u3000", "\u2028", "\u0085", "\u0301", "\u0308", "\u00e9", "\u4e2d", "\u0645",
    "\U0001F600", "\u200d", "\u017f"]
texts = []
for _ in range(300):
    out = []
    for _ in range(random.randint(1, 24)):
        r = random.random()
        out.append(random.choice(ascii_) if r < 0.3 else random.choice(common) if r < 0.6 else chr(random.choice(cps)))
    texts.append("".join(out))
with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
    json.dump(texts, f)
    f.flush()
    ref = json.loads(subprocess.run(["node", "scripts/tokenize_reference.js", f.name],
                                    check=True, capture_output=True, text=True).stdout)
rows = [{"text": r["text"], "ids": r["ids"], "nfc": unicodedata.normalize("NFC", r["text"]) == r["text"]} for r in ref]
with open("tests/model/data/tokenizer_reference_random.json", "w") as f:
    f.write("[\n" + ",\n".join("  " + json.dumps(r, ensure_ascii=False) for r in rows) + "\n]\n")
print(len(rows), "strings,", sum(not r["nfc"] for r in rows), "not NFC")
