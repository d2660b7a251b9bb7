mkdir -p inbox && mv drop/*.txt inbox/ && ./queue done
