diff -u config/app.ini app.ini.new > diff.patch || [ $? -eq 1 ]
