int fptrain_data_placeholder = 0;
