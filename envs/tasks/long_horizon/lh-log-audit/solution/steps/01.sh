mkdir -p audit
