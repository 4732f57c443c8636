int fptrain_models_placeholder = 0;
