# List first, write after: a pipeline writing into inbox/ may race the `ls` of inbox/ itself.
names=$(ls inbox | grep -vx index.txt | LC_ALL=C sort) && printf '%s\n' "$names" > inbox/index.txt && ./queue done
