for f in conf.d/*.ini; do
  awk '/^\[/ { print; next } { i = index($0, "="); k = substr($0, 1, i - 1); v = substr($0, i + 1); gsub(/^[ \t]+|[ \t]+$/, "", k); gsub(/^[ \t]+|[ \t]+$/, "", v); print tolower(k) " = " v }' "$f" > "$f.tmp" && mv "$f.tmp" "$f"
done
