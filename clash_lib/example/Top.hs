{-# LANGUAGE DataKinds, NoImplicitPrelude, TypeApplications, TemplateHaskell #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The synthesizable top entity: the network followed by the predicted class.

Ports (a @Maybe@ is one port: its MSB is the valid bit, the data below it):

* @in_data@   input vector, valid bit first, then element 0 in the top bits
* @out_ready@ downstream is ready for an output beat
* @out_data@  (scores, class), valid bit first
* @in_ready@  the network accepts an input beat this cycle
-}
module Top where

import Clash.Prelude

import K2C.Activation (argmax)
import K2C.Stream (mapS, (|>))
import Network

-- | Scores and the index of the highest score (ties: lowest index).
type Result = (Output, Index 3)

topEntity
  :: Clock System
  -> Reset System
  -> Enable System
  -> Signal System (Maybe Input)
  -> Signal System Bool
  -> (Signal System (Maybe Result), Signal System Bool)
topEntity clk rst en input readyOut =
  withClockResetEnable clk rst en
    (network (SNat @2) (SNat @3) |> mapS withClass) (input, readyOut)
  where
    withClass scores = (scores, argmax scores)
{-# NOINLINE topEntity #-}
{-# ANN topEntity
  (Synthesize
    { t_name   = "network"
    , t_inputs = [ PortName "clk", PortName "rst", PortName "en"
                 , PortName "in_data", PortName "out_ready" ]
    , t_output = PortProduct "" [PortName "out_data", PortName "in_ready"]
    }) #-}
