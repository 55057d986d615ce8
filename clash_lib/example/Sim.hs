{-# LANGUAGE DataKinds #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
-- | Simulation executable (Sim protocol, see K2C.Sim). Run it from this
-- directory: the weight files are read relative to the working directory.
module Main (main) where

import K2C.Memory (romWords)
import K2C.Sim (simMain)
import Top (topEntity)
import qualified Weights as W

main :: IO ()
main = simMain topEntity (sum [romWords W.dense_0, romWords W.dense_1])
