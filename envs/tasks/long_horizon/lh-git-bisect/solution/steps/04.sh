git -C repo rev-parse refs/bisect/bad > notes/first_bad.txt
