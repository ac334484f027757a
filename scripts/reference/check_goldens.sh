#!/usr/bin/env bash
# Regenerates the reference goldens and compares them with the committed ones (CI).
#
#   scripts/reference/check_goldens.sh                      # check: exit 0 iff every golden matches
#   scripts/reference/check_goldens.sh --negative-control   # the comparison must FAIL on corrupted
#                                                           # logits and on corrupted tokens (exit 0 iff both fail)
#   scripts/reference/check_goldens.sh --bless              # rewrite the committed goldens from scratch
#
# For each golden: `gpnpu make-checkpoint --config CONFIG --seed SEED`, `gpnpu quantize`, then
# golden.py on the committed golden's own inputs (prompt ids, pixel patches, grid, steps), then a
# comparison: token ids equal and logits cosine >= 0.999999 at every row, for fp32 and w4a16.
# --bless makes the inputs with the C++ host (`gpnpu preprocess` of a test image, `gpnpu tokenize`
# of the chat template) instead. Environment: GPNPU (the binary, default build/gpnpu),
# PYTHON (default /usr/bin/python3: Debian's torch; goldens depend on its BLAS, docs/testing.md model-test item 9).
set -euo pipefail
cd "$(dirname "$0")/../.."

GPNPU=${GPNPU:-build/gpnpu}
PYTHON=${PYTHON:-/usr/bin/python3}
REF=scripts/reference
GOLDEN_DIR=tests/model/golden
MODE=check
case "${1:-}" in
  "") ;;
  --negative-control) MODE=negative ;;
  --bless) MODE=bless ;;
  *) echo "check_goldens: unknown argument '$1' (use --negative-control or --bless)" >&2; exit 2 ;;
esac

# name  config  seed  image  size(WxH)  prompt text
GOLDENS=(
  "tiny_seed1|tiny|1|tests/model/data/image_photo_256.png|320x224|Describe this image."
)

[ -x "$GPNPU" ] || { echo "check_goldens: $GPNPU not found; build it first (cmake --build build --target gpnpu)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
status=0
for entry in "${GOLDENS[@]}"; do
  IFS='|' read -r name config seed image size text <<<"$entry"
  committed="$GOLDEN_DIR/reference_$name.h5"
  ck="$TMP/$name"
  "$GPNPU" make-checkpoint --config "$config" --seed "$seed" --out "$ck" >/dev/null
  "$GPNPU" quantize --model "$ck" --out "$ck/w4a16.safetensors" >/dev/null
  if [ "$MODE" = bless ]; then
    out=$("$GPNPU" preprocess --image "$image" --size "$size" --out "$TMP/$name.pixels.f32")
    grid=$(sed -n 's/^grid_thw *(\([0-9]*\), \([0-9]*\), \([0-9]*\)).*/\1,\2,\3/p' <<<"$out")
    [ -n "$grid" ] || { echo "check_goldens: cannot read grid_thw from gpnpu preprocess output:" >&2; echo "$out" >&2; exit 2; }
    chat=$'<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>'"$text"$'<|im_end|>\n<|im_start|>assistant\n'
    printf '%s' "$chat" >"$TMP/$name.prompt.txt"
    "$GPNPU" tokenize --file "$TMP/$name.prompt.txt" >"$TMP/$name.ids.txt"
    "$PYTHON" "$REF/golden.py" --model "$ck" --bundle "$ck/w4a16.safetensors" --ids "$TMP/$name.ids.txt" \
      --pixels "$TMP/$name.pixels.f32" --grid "$grid" --steps 20 --out "$committed" \
      --note "make-checkpoint --config $config --seed $seed; preprocess --image $image --size $size; prompt '$text'"
    echo "check_goldens: blessed $committed"
    continue
  fi
  [ -f "$committed" ] || { echo "check_goldens: $committed is missing (run with --bless to create it)" >&2; exit 2; }
  "$PYTHON" "$REF/golden.py" --model "$ck" --bundle "$ck/w4a16.safetensors" --from-golden "$committed" \
    --out "$TMP/$name.h5" >/dev/null
  if [ "$MODE" = check ]; then
    echo "check_goldens: $name"
    "$PYTHON" "$REF/golden.py" --compare "$TMP/$name.h5" --against "$committed" || status=1
  else
    for what in logits tokens; do
      if "$PYTHON" "$REF/golden.py" --compare "$TMP/$name.h5" --against "$committed" --corrupt "$what" >/dev/null 2>&1; then
        echo "check_goldens: NEGATIVE CONTROL BROKEN: corrupted $what of $name passed the comparison" >&2
        status=1
      else
        echo "check_goldens: negative control ok: corrupted $what of $name fails the comparison"
      fi
    done
  fi
done
if [ "$status" -ne 0 ] && [ "$MODE" = check ]; then
  echo "check_goldens: FAILED: the reference no longer reproduces the committed goldens (see above)." >&2
  echo "  If a change to the checkpoint generator, quantiser or reference is intended, rerun with --bless" >&2
  echo "  and commit tests/model/golden/." >&2
fi
exit $status
