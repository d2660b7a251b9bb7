mkdir -p conf.d
