{ git -C repo rev-parse 'v1.1.0^{commit}'; git -C repo rev-list --count main; } > release.txt
