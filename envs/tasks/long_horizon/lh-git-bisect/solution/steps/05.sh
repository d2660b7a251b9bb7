git -C repo bisect reset >/dev/null
