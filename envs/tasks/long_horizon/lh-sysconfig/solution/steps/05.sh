sed -i -e 's/^10\.0\.0\.4 cache\.internal$/10.0.0.6 cache.internal cache/' -e '/old\.internal/d' etc/hosts
echo '10.0.0.5 db.internal db' >> etc/hosts
