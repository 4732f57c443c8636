int fptrain_trainer_placeholder = 0;
