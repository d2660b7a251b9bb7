{
  echo file,bytes,sha256
  for f in $(cd backups/daily && ls *.tar.gz | LC_ALL=C sort); do
    echo "$f,$(stat -c %s backups/daily/$f),$(sha256sum backups/daily/$f | cut -d' ' -f1)"
  done
} > backups/index.csv
