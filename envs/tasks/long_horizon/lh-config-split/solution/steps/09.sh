cat > check.sh <<'SH'
#!/usr/bin/env bash
# Exit 0 iff every conf.d/*.ini is one section header followed by unique `key = value` lines.
for f in conf.d/*.ini; do
  awk '
    NR == 1 { if ($0 !~ /^\[[^]]+\]$/) exit 1; next }
    !/^[a-z0-9_]+ = .*$/ { exit 1 }
    { k = substr($0, 1, index($0, " ") - 1); if (seen[k]++) exit 1 }
  ' "$f" || exit 1
done
exit 0
SH
chmod +x check.sh
