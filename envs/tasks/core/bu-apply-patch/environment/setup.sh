#!/usr/bin/env bash
set -euo pipefail
mkdir -p src
printf 'def area(w, h):\n    return w + h\n\n\ndef perimeter(w, h):\n    return w * h\n' > src/geometry.py
printf 'VERSION = "0.1"\n' > src/version.py
cat > fix.patch <<'EOF'
--- a/src/geometry.py
+++ b/src/geometry.py
@@ -1,6 +1,6 @@
 def area(w, h):
-    return w + h
+    return w * h


 def perimeter(w, h):
-    return w * h
+    return 2 * (w + h)
--- a/src/version.py
+++ b/src/version.py
@@ -1 +1 @@
-VERSION = "0.1"
+VERSION = "0.2"
EOF
