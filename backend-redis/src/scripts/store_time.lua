-- store_time: the server clock in microseconds.
return now_us()
