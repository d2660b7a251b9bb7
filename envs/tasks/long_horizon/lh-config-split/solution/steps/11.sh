cat > render.sh <<'SH'
#!/usr/bin/env bash
# Prints app.ini.new with ${NAME} placeholders filled from secrets.env.
exec python3 - <<'PY'
import re
secrets = dict(line.rstrip("\n").split("=", 1) for line in open("secrets.env") if "=" in line)
text = open("app.ini.new").read()
print(re.sub(r"\$\{([A-Z0-9_]+)\}", lambda m: secrets[m.group(1)], text), end="")
PY
SH
chmod +x render.sh
