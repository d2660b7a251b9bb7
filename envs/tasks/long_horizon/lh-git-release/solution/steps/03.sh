cd repo
python3 - <<'PY'
import re
src = open("calc.py").read()
src = re.sub(r"(def subtract\(a, b\):\n    return )a \+ b", r"\1a - b", src)
open("calc.py", "w").write(src)
PY
git commit -qam "Fix subtract"
