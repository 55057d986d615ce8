{-# LANGUAGE DataKinds, TypeApplications #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
-- | Simulation executable (Sim protocol, see K2C.Sim). Run it from this
-- directory: the weight files are read relative to the working directory.
--
-- Build and check (outside the repository):
--
-- > ghc -O2 -i. -i.. -outputdir /tmp/k2c-example -o /tmp/k2c-example/sim Sim.hs
-- > /tmp/k2c-example/sim < input.txt | diff - expected.txt
module Main (main) where

import Clash.Prelude (SNat (..))

import K2C.Memory (romWords)
import K2C.Sim (simMain)
import Top (BeatWidth, BeatsPerImage, Classes, topEntity)
import qualified Weights as W

main :: IO ()
main = simMain @BeatsPerImage @BeatWidth @8 @8 @Classes @8 @8
  SNat topEntity (sum [romWords W.dense_0, romWords W.dense_1])
