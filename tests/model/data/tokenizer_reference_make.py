#!/usr/bin/python3
# Makes tokenizer_reference.json: hand-picked strings (special tokens, whitespace runs,
# contractions, digits, scripts, emoji, NFD input) with the ids of the npm package's
# own JavaScript tokenizer (scripts/tokenize_reference.js).
# Run from the repository root: /usr/bin/python3 tests/model/data/tokenizer_reference_make.py
import json, subprocess, tempfile, unicodedata
S = [
 "Hello, world!",
 "Describe this image.",
 "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n<|im_start|>assistant\n",
 "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
 "<think>\n\n</think>\n\n",
 "<tool_call>{\"name\": \"f\"}</tool_call><tool_response>ok</tool_response>",
 "<|endoftext|><|fim_prefix|>a<|fim_middle|>b<|fim_suffix|>c<|fim_pad|><|repo_name|>r<|file_sep|>",
 "<|object_ref_start|>dog<|object_ref_end|><|box_start|>(1,2),(3,4)<|box_end|><|quad_start|><|quad_end|><|vision_pad|><|video_pad|>",
 "<|im_start|<|im_start|>>",
 "<|unknown|> <| im_start |>",
 "",
 " ",
 "  ",
 "\n",
 "\n\n",
 "\r\n",
 "\n \n  x",
 "a  b   c    d",
 "trailing spaces   ",
 "   leading spaces",
 "tabs\tand\t\ttabs \t mixed",
 "line1\nline2\n\nline4\r\nline5\r\r\n",
 "x \n\n  \t y",
 "end with newline and spaces\n   ",
 "12345 678901234567890",
 "3.14159, -2.5e10, 1,000,000",
 "Phone: +1 (555) 010-9999",
 "\u0661\u0662\u0663 \u0968\u0969 \u2164 \u00bd \u00b2",
 "I'm sure you've seen it; they'll go, we'd stay, it's ok, don't",
 "I'M SURE YOU'VE SEEN IT; THEY'LL GO, WE'D STAY, IT'S OK, DON'T",
 "'s 't 're 've 'm 'll 'd 'x 'S 'Re",
 "rock'n'roll o'clock ''quoted''",
 "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe",
 "cafe\u0301 nai\u0308ve",          # NFD: normalises to NFC
 "\u212b \u2126 \u0041\u030a",      # Angstrom/Ohm signs and A+ring: NFC maps them
 "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
 "\u6211\u559c\u6b22\u673a\u5668\u5b66\u4e60\u548c\u81ea\u7136\u8bed\u8a00\u5904\u7406\u3002",
 "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002\u30ab\u30bf\u30ab\u30ca\u3082\u3002",
 "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4",
 "\u1100\u1161\u11a8",              # conjoining jamo -> precomposed Hangul under NFC
 "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0401\u0436",
 "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u03ba\u03cc\u03c3\u03bc\u03b5",
 "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
 "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
 "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
 "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
 "Mixed: English \u4e2d\u6587 \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u65e5\u672c\u8a9e 123",
 "\U0001F600\U0001F389\U0001F44D",
 "emoji \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family, flag \U0001F1EF\U0001F1F5, skin \U0001F44B\U0001F3FD",
 "\u2764\ufe0f \u2603 \u2705 \u00a9 \u2122",
 "math: \u2200x\u2208\u211d, x\u00b2 \u2265 0 \u2192 \u221a(x\u00b2) = |x|",
 "code: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
 "def f(x):\n    return x ** 2  # square\n\n\nprint(f(3))\n",
 "    indented\n        more\n\tand tab\n",
 "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
 "https://example.com/path?q=1&r=two#frag",
 "user@example.org, #hashtag @mention $100 50% ^_^ ~~~ ***",
 "!!!???...,,,;;;:::",
 "--- === ___ +++ <<< >>>",
 "a\u00a0b\u3000c\u2003d",           # no-break, ideographic, em space
 "x\u2028y\u2029z",                  # line/paragraph separators
 "\u00a0\u00a0lead nbsp",
 "zero\u200bwidth\u200cjoin\u200dchars",
 "\u0007bell\u001bescape\u0000nul",
 "\u00ad soft hyphen\u00adinside",
 "\u017f long s: it'\u017f",
 "\u00c5ngstr\u00f6m \u00c6\u00d8\u00c5 \u00e6\u00f8\u00e5 \u0141\u00f3d\u017a",
 "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
 "\u1e9b\u0323 \u0071\u0307\u0323",     # reordering of combining marks under NFC
 "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX!",
 "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
 "                                                                                                  x",
 "\n\n\n\n\n\n\n\n\n\n",
 "ab12cd34 x1y2z3 1st 2nd 3rd",
 "A1.B2-C3_D4",
 " \U0001F600 ",
 "\U00020000\U0002A6D6 rare CJK ext B",
 "\U0001D400\U0001D401 math bold",
 "Antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
 "\u00bfQu\u00e9 tal? \u00a1Bien!",
 "\u300c\u5f15\u7528\u300d\u3010\u6ce8\u3011\u2026\u2014",
 "end<|im_end|>",
 "<|image_pad|><|image_pad|><|image_pad|>",
 "x'Data IT'Sall he'DANCE",
 "'Sx 'REally 'LLama 'Dog 'TX 'Ve'M'd",
 "\u2460\u2461\u2462 \u00b2\u00b3\u00b9 \u00bd\u00bc \u216b\u216b \u0661\u0662\u0663\u0664 \u2070\u00b9\u00b2",
]
with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
    json.dump(S, f, ensure_ascii=False)
    f.flush()
    out = subprocess.run(["node", "scripts/tokenize_reference.js", f.name], check=True, capture_output=True, text=True).stdout
with open("tests/model/data/tokenizer_reference.json", "w") as f:
    f.write(out)
print(len(S), "strings,", sum(1 for s in S if unicodedata.normalize("NFC", s) != s), "not NFC")
