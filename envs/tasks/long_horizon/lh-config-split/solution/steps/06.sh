first=1
while read -r f; do
  [ "$first" = 1 ] || echo
  cat "conf.d/$f"
  first=0
done < conf.d/index.txt > app.ini.new
