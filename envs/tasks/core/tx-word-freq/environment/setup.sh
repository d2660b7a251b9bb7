#!/usr/bin/env bash
set -euo pipefail
cat > book.txt <<'EOF'
The cat and the dog. The DOG barked; the cat ran!
A bird, a cat, and a dog met at the river-bank.
"Run," said the bird. And they ran and ran.
Cat-like, the dog waited: dog, dog, dog.
EOF
